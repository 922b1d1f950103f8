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
  /**
   * Messages per batch request, at most. Default 500 (QSTASH_BATCH_LIMITS): a pass of
   * 200 events with two subscriptions (250 jobs) is one request (ADR 0025).
   */
  chunkSize?: number;
  /**
   * Bytes per batch request, at most (a single message larger than this goes alone).
   * Default 1,000,000 (QSTASH_BATCH_LIMITS).
   */
  chunkBytes?: number;
  /**
   * Batch requests a publish keeps in flight at once. A pass's chunks go out
   * together, so it waits for one QStash round trip instead of one per chunk.
   * Workers let an invocation have 6 outgoing connections waiting for their
   * response headers (a seventh waits its turn); the invocation's database pool
   * opens at most 3 (MAX_CONNECTIONS_PER_INVOCATION in src/worker/database.ts),
   * so 3 keeps a pass within the limit whatever else the invocation is doing.
   * A batch of 200 events with the two subscriptions of the reference app is
   * 250 jobs, one request; more subscriptions or larger bodies take more. Default 3.
   */
  concurrency?: number;
  /**
   * Jobs QStash delivers at once to each subscription of this deployment (flow
   * control, one key per subscription and public URL: subscriptionFlowControl).
   * Every delivery is a Worker invocation with its own database connections;
   * unbounded, a backlog of thousands of jobs became thousands of concurrent
   * invocations and exhausted Postgres' connections. Per subscription, so one whose
   * handler waits on something slow (a mail provider timing out) holds only its own
   * jobs back (ADR 0028). Default 20.
   */
  deliveryParallelism?: number;
  /**
   * Sent as every job's `Upstash-Label`: what the cron sweep lists QStash's dead-letter
   * queue by (deploymentLabel, ADR 0027). Unset, jobs carry no label.
   */
  label?: string;
}

/**
 * How much one batch request to QStash carries by default (ADR 0025). QStash's API
 * names no message count for `/v2/batch`; these are ours: 500 messages, and no request
 * body larger than the largest message every plan accepts (1 MB).
 */
export const QSTASH_BATCH_LIMITS = { messages: 500, bytes: 1_000_000 } as const;

const JSON_HEADERS = { "Content-Type": "application/json" } as const;
const encoder = new TextEncoder();
type SdkBody = NonNullable<Parameters<Client["http"]["request"]>[0]["body"]>;

/**
 * The SDK's client as every part of this project uses it: the client's own retries
 * off (the caller owns when to try again: a relay pass's backoff, the next sweep, an
 * operator asking again), never Upstash's downloadable dev server, no telemetry.
 */
export function qstashClient(options: { baseUrl: string; token: string }): Client {
  return new Client({
    baseUrl: options.baseUrl,
    token: options.token,
    retry: false,
    devMode: false,
    enableTelemetry: false,
  });
}

/**
 * How long a request of the cron sweep's to QStash through the SDK (the dead-letter
 * queue, the canary) may go unanswered. The SDK takes no AbortSignal, so the sweep
 * stops waiting rather than cancelling: a QStash that took the connection and never
 * answered held a sweep for minutes, before its canary step, so nothing said why
 * (a walkthrough, ADR 0045).
 */
export const QSTASH_ANSWER_TIMEOUT_MS = 10_000;

/** `work`, or a rejection saying QStash did not answer `what` within `ms`. */
export function qstashAnswerWithin<T>(
  work: Promise<T>,
  what: string,
  ms = QSTASH_ANSWER_TIMEOUT_MS,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`QStash did not answer ${what} within ${ms / 1000} s`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/**
 * A GET of QStash's REST API (`path` from `/v2` on, its parts already encoded) with
 * the token: the answer's JSON, or null when QStash answers 404. A plain fetch, not
 * the SDK: the SDK logs every non-2xx answer as an error, and for these reads (a
 * job QStash no longer holds, a flow-control key no job has had lately) a 404 is an
 * expected answer. Any other answer but a 2xx throws, and so does no answer within
 * `timeoutMs` when one is given.
 */
export async function qstashGet(
  options: { baseUrl: string; token: string; timeoutMs?: number },
  path: string,
): Promise<unknown> {
  const ms = options.timeoutMs;
  const res = await fetch(`${stripSlash(options.baseUrl)}${path}`, {
    headers: { authorization: `Bearer ${options.token}` },
    ...(ms === undefined ? {} : { signal: AbortSignal.timeout(ms) }),
  }).catch((error: unknown) => {
    if ((error as Error).name === "TimeoutError")
      throw new Error(`QStash did not answer within ${ms! / 1000} s`);
    throw error;
  });
  if (res.status === 404) {
    await res.body?.cancel();
    return null;
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`QStash answered ${res.status} to GET ${path}`);
  }
  return res.json();
}

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
 * QStash flow control for one kind of job to one deployment: at most `parallelism`
 * of them in flight, which bounds the Worker invocations they start (and so their
 * database connections). Each `kind` is a budget of its own: one per subscription
 * (subscriptionFlowControl), one per webhook endpoint (ADR 0028).
 */
export function flowControlFor(
  publicUrl: string,
  kind: string,
  parallelism: number,
): { key: string; parallelism: number } {
  return { key: `edge-outbox-${keyPart(kind)}-${hostOf(publicUrl)}`, parallelism };
}

/** The flow-control budget of one subscription's jobs: a slow handler holds back only its own. */
export function subscriptionFlowControl(
  publicUrl: string,
  subscription: string,
  parallelism: number,
): { key: string; parallelism: number } {
  return flowControlFor(publicUrl, `jobs-${subscription}`, parallelism);
}

/**
 * What a label may hold, here: QStash's docs name no character set, a comma would
 * split one label into two (`Upstash-Label: a,b`), and a label QStash refused would
 * fail every publish. So only letters, digits, `_` and `-`, which every label in
 * Upstash's examples and in public code that uses them keeps to.
 */
export const QSTASH_LABEL = /^[A-Za-z0-9_-]+$/;

/**
 * The label every job of a deployment carries unless QSTASH_LABEL names another:
 * per deployment, as the flow-control key is, so two deployments sharing a QStash
 * account never collect each other's dead letters (ADR 0027). The host's dots and
 * port colon become `-`: `edge-outbox-my-worker-example-workers-dev`.
 */
export function deploymentLabel(publicUrl: string): string {
  return `edge-outbox-${new URL(publicUrl).host.replace(/[^A-Za-z0-9_-]/g, "-")}`;
}

/** The public URL's host as a flow-control key takes it (a label replaces more: deploymentLabel). */
function hostOf(publicUrl: string): string {
  return keyPart(new URL(publicUrl).host);
}

function keyPart(text: string): string {
  return text.replace(/[^A-Za-z0-9._-]/g, "_");
}

/** Refuses at start a label that would not reach QStash as given. */
export function checkedLabel(label: string | undefined): string | undefined {
  if (label !== undefined && !QSTASH_LABEL.test(label)) {
    throw new TypeError(`label must be letters, digits, "_" or "-", got ${JSON.stringify(label)}`);
  }
  return label;
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

/**
 * A request to QStash that failed, as a PublishError: QStash's status and whose
 * fault it is (kindOfStatus), or unreachable (an outage) when no answer came.
 */
export function asPublishError(error: unknown): PublishError {
  if (error instanceof PublishError) return error;
  if (error instanceof QstashError && typeof error.status === "number") {
    const { status } = error;
    return new PublishError(`QStash ${status}: ${error.message}`, kindOfStatus(status), status, {
      cause: error,
    });
  }
  return new PublishError(`QStash unreachable: ${String(error)}`, "outage", undefined, { cause: error });
}

/**
 * What an operator should do about a publish QStash did not take: asking again
 * helps with an outage, not with a token QStash refuses or a QStash URL that is wrong.
 */
export function publishAdvice(error: PublishError): string {
  if (error.status === 401 || error.status === 403) return "check QSTASH_TOKEN, then try again";
  if (error.status === 404) return "check QSTASH_URL, then try again";
  return "try again";
}

/**
 * Publishes through the batch API with one deduplication id per (event, subscription),
 * so a pass replayed after a crash is dropped by QStash inside its 10-minute window.
 * The client's own retries are off: a failed publish fails the pass, and the relay's
 * backoff (recorded in the database) owns when to try again.
 *
 * The request goes through the SDK's client (`client.http.request`: base URL, token,
 * fetch, QstashError for a refused request), with the batch body written here rather
 * than by `client.batch`, which builds two undici `Headers` per message and copies them
 * into a plain object, the largest part of the relay's CPU through the SDK after `fetch`
 * (ADR 0018, docs/performance.md). Every header but the deduplication id is the same for
 * all of a subscription's jobs, so each message is its JSON text around the id and the
 * body. The bytes are the ones `client.batch` sends for the same messages
 * (test/outbox/qstash-publisher.test.ts compares them with the installed SDK's).
 */
export function createQStashPublisher(options: QStashPublisherOptions): Publisher {
  const client = qstashClient(options);
  const chunkSize = positiveInt(options.chunkSize ?? QSTASH_BATCH_LIMITS.messages, "chunkSize");
  const chunkBytes = positiveInt(options.chunkBytes ?? QSTASH_BATCH_LIMITS.bytes, "chunkBytes");
  const concurrency = positiveInt(options.concurrency ?? 3, "concurrency");
  const failureCallback = failureCallbackUrl(options.publicUrl);
  // Checked here, once: the SDK refused a flow control without a positive parallelism
  // on every publish, and the templates below would send whatever they were given.
  const parallelism = positiveInt(options.deliveryParallelism ?? 20, "deliveryParallelism");
  const label = checkedLabel(options.label);
  const constantHeaders = (job: Job): Record<string, string> => {
    const flowControl = subscriptionFlowControl(options.publicUrl, job.subscription, parallelism);
    return {
      ...JSON_HEADERS,
      "Upstash-Method": "POST",
      "Upstash-Failure-Callback": failureCallback,
      "Upstash-Flow-Control-Key": flowControl.key,
      "Upstash-Flow-Control-Value": `parallelism=${flowControl.parallelism}`,
      ...(job.retries === undefined ? {} : { "Upstash-Retries": job.retries.toFixed(0) }),
      ...(label === undefined ? {} : { "Upstash-Label": label }),
    };
  };
  // One template per (subscription, retries): built on a subscription's first job.
  const templates = new Map<string, MessageTemplate>();
  const templateFor = (job: Job): MessageTemplate => {
    if (job.forward !== undefined) {
      // A job's own headers (a retry's, rare): a template of its own, not kept.
      const forwarded = Object.entries(job.forward).map(([name, value]) => [
        `Upstash-Forward-${name}`,
        value,
      ]);
      try {
        return messageTemplate(jobUrl(options.publicUrl, job.subscription), {
          ...constantHeaders(job),
          ...Object.fromEntries(forwarded),
        });
      } catch (error) {
        // `Headers` refused a name or value: the job's own fault, like a bad deduplication id.
        throw new PublishError(`job ${job.deduplicationId}: ${String(error)}`, "rejected", undefined, {
          cause: error,
        });
      }
    }
    const key = `${job.subscription}\u0000${job.retries ?? ""}`;
    let template = templates.get(key);
    if (!template) {
      template = messageTemplate(jobUrl(options.publicUrl, job.subscription), constantHeaders(job));
      templates.set(key, template);
    }
    return template;
  };

  /**
   * The batch requests' bodies for `jobs`, in order, as UTF-8 bytes: each message is
   * written straight into one buffer rather than joined into a string first. A pass's
   * body as one string (~150 KB for 250 jobs) cost Node about three times what the
   * same bytes cost written this way (V8 flattens a string that large outside its
   * young generation before encoding it); in the chunks of 100 before ADR 0025 the
   * difference was small.
   * A message that would take its chunk past `chunkSize` messages or `chunkBytes`
   * bytes opens the next chunk. Throws the job's own PublishError before any request
   * is sent when a deduplication id cannot be sent as a header.
   */
  function writeChunks(jobs: Job[]): Chunk[] {
    const out = new ByteWriter(jobs.length * 640);
    const bounds: { jobs: Job[]; from: number; to: number }[] = [];
    let first = 0; // the current chunk's first job
    let start = 0; // and its first byte, its `[`
    out.byte(OPEN);
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i]!;
      const message = templateFor(job).message(job.deduplicationId, job.json ?? JSON.stringify(job.body));
      const comma = out.at;
      if (i > first) out.byte(COMMA);
      const at = out.at;
      out.text(message);
      // +1: the `]` that closes the chunk.
      if (i > first && (i - first >= chunkSize || out.at + 1 - start > chunkBytes)) {
        // This message opens the next chunk: `]` where its comma was, `[`, then the
        // message itself, one byte further on.
        out.insertByteAt(at, OPEN);
        out.bytes[comma] = CLOSE;
        bounds.push({ jobs: jobs.slice(first, i), from: start, to: comma + 1 });
        first = i;
        start = at;
      }
    }
    out.byte(CLOSE);
    bounds.push({ jobs: jobs.slice(first), from: start, to: out.at });
    // Views of the final buffer: it may have grown (and moved) while it was written.
    return bounds.map(({ jobs, from, to }) => ({ jobs, body: out.bytes.subarray(from, to) }));
  }

  async function publishChunk({ jobs: chunk, body }: Chunk): Promise<PublishedJob[]> {
    try {
      const response = await client.http.request<unknown>({
        path: ["v2", "batch"],
        // Bytes, not a string: fetch would flatten and copy a string while the
        // request is in flight, on the JS heap, where it outlived young collections;
        // the bytes live outside the heap (CPU per 1,000 events via the SDK 0.81–0.87
        // of the string body's in three runs, docs/performance.md).
        // The SDK hands `body` to fetch unchanged; its type names fewer forms than
        // fetch takes, hence the cast.
        body: body as unknown as SdkBody,
        headers: JSON_HEADERS,
        method: "POST",
      });
      // As client.batch reads it: a single answer stands for a batch of one.
      const answers = Array.isArray(response) ? (response as unknown[]) : [response];
      // One answer per message, in order, or the ids cannot be matched to their jobs.
      if (answers.length !== chunk.length) {
        throw new PublishError(
          `QStash answered ${answers.length} results for ${chunk.length} messages`,
          "outage",
        );
      }
      return chunk.map((job, i) => {
        const answer = answers[i] as { messageId?: string; deduplicated?: boolean } | undefined;
        if (!answer?.messageId) {
          throw new PublishError(`QStash answered no messageId for ${job.deduplicationId}`, "outage");
        }
        return { messageId: answer.messageId, deduplicated: answer.deduplicated === true };
      });
    } catch (error) {
      throw asPublishError(error);
    }
  }

  return {
    async publish(jobs, signal) {
      if (jobs.length === 0) return [];
      const chunks = writeChunks(jobs);
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

/** One batch request: its jobs, in order, and its body. */
interface Chunk {
  jobs: Job[];
  body: Uint8Array;
}

const OPEN = 0x5b; // [
const COMMA = 0x2c;
const CLOSE = 0x5d; // ]

/** A growing UTF-8 buffer: text is encoded into it in place, never joined first. */
class ByteWriter {
  bytes: Uint8Array;
  at = 0;

  constructor(capacity: number) {
    this.bytes = new Uint8Array(Math.max(capacity, 1024));
  }

  byte(value: number): void {
    this.#room(1);
    this.bytes[this.at++] = value;
  }

  text(value: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    this.#room(value.length * 3);
    this.at += encoder.encodeInto(value, this.bytes.subarray(this.at)).written;
  }

  /** Moves the bytes from `index` on one further and writes `value` at `index`. */
  insertByteAt(index: number, value: number): void {
    this.#room(1);
    this.bytes.copyWithin(index + 1, index, this.at);
    this.bytes[index] = value;
    this.at++;
  }

  #room(needed: number): void {
    if (this.at + needed <= this.bytes.length) return;
    const grown = new Uint8Array(Math.max(this.bytes.length * 2, this.at + needed));
    grown.set(this.bytes.subarray(0, this.at));
    this.bytes = grown;
  }
}

const DEDUPLICATION_ID = "upstash-deduplication-id";
/**
 * Printable ASCII, no space at either end: a header value undici takes as it is (it
 * trims surrounding whitespace and refuses control characters). The relay's ids
 * (`<uuid>:<subscription>`) always are; anything else would not be sent as given.
 */
const PLAIN_HEADER_VALUE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

interface MessageTemplate {
  /** One message of a batch request's JSON array. */
  message(deduplicationId: string, body: string): string;
}

/**
 * A batch message as the SDK's `batch` writes it: `destination`, then `headers` with
 * lower-case names in sorted order (undici's `Headers` iterates them so), then `body`
 * as a JSON string. The constant headers go through `Headers` once, here, so their
 * names and values are checked and normalised exactly as the SDK's per-message
 * `Headers` would; the deduplication id takes its sorted place among them.
 */
function messageTemplate(destination: string, constant: Record<string, string>): MessageTemplate {
  const entries = [...new Headers({ ...constant, [DEDUPLICATION_ID]: "-" })];
  const at = entries.findIndex(([name]) => name === DEDUPLICATION_ID);
  const pair = ([name, value]: [string, string]) => `${JSON.stringify(name)}:${JSON.stringify(value)}`;
  const head =
    `{"destination":${JSON.stringify(destination)},"headers":{` +
    entries
      .slice(0, at)
      .map((e) => `${pair(e)},`)
      .join("") +
    `${JSON.stringify(DEDUPLICATION_ID)}:`;
  const tail = `${entries
    .slice(at + 1)
    .map((e) => `,${pair(e)}`)
    .join("")}},"body":`;
  return {
    message(deduplicationId, body) {
      if (!PLAIN_HEADER_VALUE.test(deduplicationId)) {
        // The job's own fault: refused like a 400, so a rows pass charges its row only.
        throw new PublishError(
          `deduplication id ${JSON.stringify(deduplicationId)} is not a plain header value`,
          "rejected",
        );
      }
      return `${head}${JSON.stringify(deduplicationId)}${tail}${JSON.stringify(body)}}`;
    },
  };
}
