import { Client, QstashError } from "@upstash/qstash";
import { PublishError, kindOfStatus } from "./errors.ts";
import type { Publisher } from "./publisher.ts";
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
  const chunkSize = options.chunkSize ?? 100;
  const failureCallback = failureCallbackUrl(options.publicUrl);
  const flowControl = {
    key: `edge-outbox-${new URL(options.publicUrl).host.replace(/[^A-Za-z0-9._-]/g, "_")}`,
    parallelism: options.deliveryParallelism ?? 20,
  };

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
      const out: PublishedJob[] = [];
      for (let i = 0; i < jobs.length; i += chunkSize) {
        // The SDK takes no AbortSignal; the relay races each publish against it,
        // and this stops a pass that gave up from sending further chunks.
        signal.throwIfAborted();
        out.push(...(await publishChunk(jobs.slice(i, i + chunkSize))));
      }
      return out;
    },
  };
}
