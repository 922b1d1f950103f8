import {
  asPublishError,
  checkedLabel,
  failureCallbackUrl,
  flowControlFor,
  jobUrl,
  publishAdvice,
  PublishError,
  QSTASH_BATCH_LIMITS,
  qstashClient,
  qstashGet,
} from "../../outbox/index.ts";
import { positiveInt } from "../../outbox/sql.ts";

/** The job route QStash calls for each delivery (not a subscription: its body is a delivery, not an event). */
export const DELIVER_JOB = "webhook.deliver";

/** What a `webhook.deliver` job carries: only the row's id; the row holds the body, endpoint and state. */
export interface DeliverJobBody {
  deliveryId: string;
}

export interface DeliverJob {
  deliveryId: string;
  /** The delivery's endpoint: its jobs share a flow-control budget, apart from every other endpoint's. */
  endpointId: string;
  /**
   * `<event id>:<endpoint id>` from fan-out, so a replayed fan-out is dropped by
   * QStash; a redelivery adds a suffix of its own, or QStash would drop it too.
   */
  deduplicationId: string;
}

/**
 * Where deliver jobs go; answers QStash's message id per job, in order. Throws a
 * PublishError when publishing failed.
 */
export interface DeliverQueue {
  enqueue(jobs: DeliverJob[]): Promise<string[]>;
}

export interface QStashDeliverQueueOptions {
  baseUrl: string;
  token: string;
  /** The Worker's public URL: jobs go to `<publicUrl>/jobs/webhook.deliver`. */
  publicUrl: string;
  /** The retry schedule's length: QStash gives up after that many retries and calls the failure callback. */
  retries: number;
  /** Deliveries in flight at once to one endpoint (QStash flow control); default DELIVER_PARALLELISM. */
  parallelism?: number;
  /** Messages per batch request, at most; default QSTASH_BATCH_LIMITS.messages (ADR 0025). */
  batchMessages?: number;
  /** Every deliver job's `Upstash-Label`, as the relay's jobs carry it (ADR 0027). */
  label?: string;
}

/**
 * Each endpoint's deliveries have a flow-control budget of their own (one key per
 * endpoint), beside the relay's 20: a slow receiver (up to the 15 s timeout per
 * attempt) holds at most this many of its own deliveries in flight, so it can
 * starve neither the subscribers' jobs nor any other endpoint's webhooks, and a
 * large backlog to one endpoint (a recover of thousands) cannot start thousands of
 * invocations at once, each with a database connection. With one key for all
 * endpoints, ten deliveries to one receiver that timed out held every slot, and
 * every other endpoint's webhooks waited behind them (ADR 0028).
 */
export const DELIVER_PARALLELISM = 10;

/** The flow-control key and limit of one endpoint's deliver jobs. */
export function deliverFlowControl(
  publicUrl: string,
  endpointId: string,
  parallelism = DELIVER_PARALLELISM,
): { key: string; parallelism: number } {
  return flowControlFor(publicUrl, `webhooks-${endpointId}`, parallelism);
}

export function createQStashDeliverQueue(options: QStashDeliverQueueOptions): DeliverQueue {
  // A failed publish fails the caller (a fan-out job QStash retries, an operator's request).
  const client = qstashClient(options);
  const url = jobUrl(options.publicUrl, DELIVER_JOB);
  // A deliver job's message is a few hundred bytes, so the count, not the bytes, bounds a request.
  const perRequest = positiveInt(options.batchMessages ?? QSTASH_BATCH_LIMITS.messages, "batchMessages");
  const failureCallback = failureCallbackUrl(options.publicUrl);
  const parallelism = positiveInt(options.parallelism ?? DELIVER_PARALLELISM, "parallelism");
  const label = checkedLabel(options.label);
  return {
    async enqueue(jobs) {
      if (jobs.length === 0) return [];
      const ids: string[] = [];
      for (let i = 0; i < jobs.length; i += perRequest) {
        const chunk = jobs.slice(i, i + perRequest);
        const answers = await client
          .batchJSON(
            chunk.map((job) => ({
              url,
              body: { deliveryId: job.deliveryId } satisfies DeliverJobBody,
              deduplicationId: job.deduplicationId,
              retries: options.retries,
              failureCallback,
              flowControl: deliverFlowControl(options.publicUrl, job.endpointId, parallelism),
              ...(label === undefined ? {} : { label }),
            })),
          )
          .catch((error: unknown) => {
            throw asPublishError(error);
          });
        for (const [n, answer] of answers.entries()) {
          const messageId = (answer as { messageId?: string }).messageId;
          if (!messageId)
            throw new PublishError(`QStash answered no messageId for ${chunk[n]?.deduplicationId}`, "outage");
          ids.push(messageId);
        }
      }
      return ids;
    },
  };
}

/**
 * What an operator is told when a re-send (redeliver, recover, a test event) was
 * not taken: each puts its rows back as they were (republish.ts, send-test.ts),
 * so nothing changed for `what` and asking again is safe. `advice` is the caller's
 * when it knows more (the CLI, run without QSTASH_URL).
 */
export function notQueuedMessage(what: string, error: PublishError, advice = publishAdvice(error)): string {
  return `QStash did not take the deliver job (${error.message}); nothing changed for ${what}: ${advice}`;
}

/** Whether QStash still holds a message to deliver: the sweep asks before taking a job for lost. */
export interface QStashMessages {
  holds(messageId: string): Promise<boolean>;
}

/** States in which a message is still to be delivered (or being delivered, or retried). */
const LIVE_STATES = new Set(["CREATED", "ACTIVE", "RETRY"]);

/**
 * QStash keeps a message while it is being delivered or retried, and removes it
 * shortly after (GET /v2/messages/{id} is 404 then). A message waiting behind flow
 * control is held, however late, so an overdue delivery is taken for lost only
 * when QStash answers 404, or names a finished state (the dev server keeps finished
 * messages and says so). Any other answer throws: the sweep then republishes nothing.
 * Read with qstashGet, not the SDK's messages.get, which logs the expected 404 as
 * an error.
 */
export function createQStashMessages(options: { baseUrl: string; token: string }): QStashMessages {
  return {
    async holds(messageId) {
      const message = (await qstashGet(options, `/v2/messages/${encodeURIComponent(messageId)}`)) as {
        state?: string;
      } | null;
      if (message === null) return false;
      return message.state === undefined || LIVE_STATES.has(message.state);
    },
  };
}
