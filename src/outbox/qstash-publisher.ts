import { Client, QstashError } from "@upstash/qstash";
import { PublishError, kindOfStatus } from "./errors.ts";
import type { Publisher } from "./publisher.ts";
import { positiveInt } from "./sql.ts";
import type { Job, PublishedJob } from "./types.ts";

export interface QStashPublisherOptions {
  /** QStash API base, e.g. https://qstash.upstash.io or the local dev server. */
  baseUrl: string;
  token: string;
  /** Public base URL of the Worker: jobs go to `<publicUrl>/jobs/<subscription>`. */
  publicUrl: string;
  /** Messages per batch request. */
  chunkSize?: number;
  /**
   * Batch requests a publish keeps in flight at once. A pass's chunks go out
   * together, so it waits for one QStash round trip instead of one per chunk.
   * Workers let an invocation have 6 outgoing connections waiting for their
   * response headers (a seventh waits its turn); the invocation's database pool
   * opens at most 3 (MAX_CONNECTIONS_PER_INVOCATION in src/worker/database.ts),
   * so 3 keeps a pass within the limit whatever else the invocation is doing.
   * A batch of 200 events with the two subscriptions of the reference app is
   * 250 jobs: three chunks, all at once. Default 3.
   */
  concurrency?: number;
  /**
   * Jobs QStash delivers at once to this deployment (flow control, one key per
   * public URL). Every delivery is a Worker invocation with its own database
   * connections; unbounded, a backlog of thousands of jobs became thousands of
   * concurrent invocations and exhausted Postgres' connections. Default 20.
   */
  deliveryParallelism?: number;
}

const JSON_HEADERS = { "Content-Type": "application/json" } as const;

/** Where QStash delivers jobs: `<publicUrl>/jobs/<subscription>`. */
export const JOBS_PATH = "/jobs";
/** Where QStash reports a job that exhausted its retries; `_` keeps it apart from subscription names. */
export const FAILURE_CALLBACK_PATH = `${JOBS_PATH}/_failed` as const;

/** The URL a job is published to, and so the URL QStash signs: the route must verify this exact one. */
export function jobUrl(publicUrl: string, subscription: string): string {
  return `${stripSlash(publicUrl)}${JOBS_PATH}/${encodeURIComponent(subscription)}`;
}

export function failureCallbackUrl(publicUrl: string): string {
  return `${stripSlash(publicUrl)}${FAILURE_CALLBACK_PATH}`;
}

/**
 * QStash flow control for jobs to one deployment: at most `parallelism` of them
 * in flight, which bounds the Worker invocations they start (and so their
 * database connections). `kind` gives another kind of job a budget of its own.
 */
export function flowControlFor(
  publicUrl: string,
  kind: string,
  parallelism: number,
): { key: string; parallelism: number } {
  const host = new URL(publicUrl).host.replace(/[^A-Za-z0-9._-]/g, "_");
  return { key: `edge-outbox-${kind ? `${kind}-` : ""}${host}`, parallelism };
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

/**
 * Publishes through the batch API with one deduplication id per (event, subscription),
 * so a pass replayed after a crash is dropped by QStash inside its 10-minute window.
 * The client's own retries are off: a failed publish fails the pass, and the relay's
 * backoff (recorded in the database) owns when to try again.
 */
export function createQStashPublisher(options: QStashPublisherOptions): Publisher {
  const client = new Client({
    baseUrl: options.baseUrl,
    token: options.token,
    retry: false,
    // Never let an environment variable start Upstash's downloadable dev server.
    devMode: false,
    enableTelemetry: false,
  });
  const chunkSize = positiveInt(options.chunkSize ?? 100, "chunkSize");
  const concurrency = positiveInt(options.concurrency ?? 3, "concurrency");
  const failureCallback = failureCallbackUrl(options.publicUrl);
  const flowControl = flowControlFor(options.publicUrl, "", options.deliveryParallelism ?? 20);

  async function publishChunk(chunk: Job[]): Promise<PublishedJob[]> {
    try {
      // batch, not batchJSON: the planner already serialised each body (job.json),
      // and batchJSON would stringify it again.
      const answers = await client.batch(
        chunk.map((job) => ({
          url: jobUrl(options.publicUrl, job.subscription),
          body: job.json ?? JSON.stringify(job.body),
          headers: JSON_HEADERS,
          deduplicationId: job.deduplicationId,
          failureCallback,
          flowControl,
          ...(job.retries === undefined ? {} : { retries: job.retries }),
        })),
      );
      return answers.map((a, i) => {
        const answer = a as { messageId?: string; deduplicated?: boolean };
        if (!answer.messageId) {
          throw new PublishError(`QStash answered no messageId for ${chunk[i]?.deduplicationId}`, "outage");
        }
        return { messageId: answer.messageId, deduplicated: answer.deduplicated === true };
      });
    } catch (error) {
      if (error instanceof PublishError) throw error;
      if (error instanceof QstashError && typeof error.status === "number") {
        throw new PublishError(
          `QStash ${error.status}: ${error.message}`,
          kindOfStatus(error.status),
          error.status,
          {
            cause: error,
          },
        );
      }
      throw new PublishError(`QStash unreachable: ${String(error)}`, "outage", undefined, { cause: error });
    }
  }

  return {
    async publish(jobs, signal) {
      const chunks: Job[][] = [];
      for (let i = 0; i < jobs.length; i += chunkSize) chunks.push(jobs.slice(i, i + chunkSize));
      const answers: PublishedJob[][] = [];
      let next = 0;
      let answered = 0;
      // The failed chunk that came first in the batch, so the error a pass records
      // does not depend on which request happened to answer first.
      const failed: { chunk?: number; error?: unknown } = {};
      // Each lane sends one chunk at a time. After a failure, or once the relay gave
      // up on this publish, no further chunk starts: as when chunks went one by one,
      // the pass rolls back, and whatever was accepted is deduplicated on replay.
      const lane = async () => {
        while (next < chunks.length && failed.chunk === undefined && !signal.aborted) {
          const index = next++;
          try {
            answers[index] = await publishChunk(chunks[index]!);
            answered++;
          } catch (error) {
            if (failed.chunk === undefined || index < failed.chunk) {
              failed.chunk = index;
              failed.error = error;
            }
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, chunks.length) }, lane));
      if (failed.chunk !== undefined) throw failed.error;
      // The SDK takes no AbortSignal; the relay races each publish against it, and
      // this stops a pass that gave up from sending further chunks.
      if (answered < chunks.length) signal.throwIfAborted();
      return answers.flat();
    },
  };
}
