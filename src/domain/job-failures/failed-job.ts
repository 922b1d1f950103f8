import { z } from "zod";
import { JOBS_PATH } from "../../outbox/index.ts";
import type { Db } from "../db.ts";
import { safeJson } from "../text.ts";
import { fromBase64 } from "../webhooks/base64.ts";
import { DELIVER_JOB } from "../webhooks/deliver-queue.ts";
import { markDeliveriesFailed, type DeliveryJobFailure } from "../webhooks/delivery-failed.ts";
import { recordJobFailures, type JobFailure } from "./record.ts";

/**
 * A job QStash gave up on, however we learnt of it: its failure callback
 * (`POST /jobs/_failed`) or its entry in QStash's dead-letter queue, which the
 * cron sweep reads for the callbacks that never reached us (dead-letters.ts).
 */
export interface FailedJob {
  /** QStash's id of the job that ran out of retries. */
  messageId: string;
  /** Where it was published: `<PUBLIC_URL>/jobs/<name>`. */
  url: string;
  /** The job body as published. */
  body: string;
  /** The job route's last answer. */
  status: number | null;
  responseBody: string | null;
  /** Retries QStash made, when it said. */
  retried: number | null;
  dlqId: string | null;
}

/**
 * Records failed jobs once each, whichever way they arrived and however often: a
 * `webhook.deliver` job fails its delivery (counted by its endpoint's alert), any
 * other job becomes a `job_failures` row (counted by its subscription's). Both are
 * idempotent on QStash's message id, so the callback and the dead letter of the
 * same job record it once between them. Two statements at most, however many jobs:
 * the sweep's dead letters come a thousand at a time. Answers how many jobs this
 * call recorded.
 */
export async function recordFailedJobs(db: Db, jobs: readonly FailedJob[]): Promise<number> {
  const deliveries: DeliveryJobFailure[] = [];
  const others: JobFailure[] = [];
  for (const f of jobs) {
    const name = jobNameOf(f.url);
    const job = {
      messageId: clean(f.messageId),
      // QStash reports 0 when no answer came (a timeout, a refused connection).
      status: within(f.status, 1, 999),
      retried: within(f.retried, 0, 2 ** 31 - 1),
      dlqId: f.dlqId === null ? null : clean(f.dlqId),
    };
    const deliveryId = name === DELIVER_JOB ? deliveryIdOf(f.body) : null;
    if (deliveryId) {
      deliveries.push({ deliveryId, ...job });
      continue;
    }
    others.push({
      ...job,
      subscription: clean(name),
      eventId: eventIdOf(f.body),
      body: clean(f.body),
      responseBody: f.responseBody === null ? null : clean(f.responseBody.slice(0, 4000)),
    });
  }
  const failed = await markDeliveriesFailed(db, deliveries);
  const recorded = await recordJobFailures(db, others);
  return failed.length + recorded.length;
}

/** recordFailedJobs for the one job a failure callback names. */
export async function recordFailedJob(db: Db, f: FailedJob): Promise<{ recorded: boolean }> {
  return { recorded: (await recordFailedJobs(db, [f])) > 0 };
}

// The record is for people, and QStash retries any 5xx: a value Postgres cannot
// store (NUL in text, an integer past int4) is cleaned rather than failing the
// record. NUL becomes U+FFFD, as undecodable bytes already do.
function clean(text: string): string {
  return text.replaceAll("\u0000", "\uFFFD");
}

function within(n: number | null, min: number, max: number): number | null {
  return n !== null && Number.isInteger(n) && n >= min && n <= max ? n : null;
}

const JOBS_PREFIX = `${JOBS_PATH}/`;
const uuid = z.guid();

/** `https://x/jobs/notify.mail` → `notify.mail`; the whole URL when it is not one of ours. */
export function jobNameOf(url: string): string {
  const path = URL.canParse(url) ? new URL(url).pathname : url;
  const at = path.lastIndexOf(JOBS_PREFIX);
  if (at === -1) return url;
  const name = path.slice(at + JOBS_PREFIX.length);
  try {
    return decodeURIComponent(name);
  } catch {
    // A malformed escape (`%E0%A4%A`): keep the name as it came.
    return name;
  }
}

function eventIdOf(jobBody: string): string | null {
  const id = (safeJson(jobBody) as { event?: { id?: unknown } } | undefined)?.event?.id;
  return uuid.safeParse(id).success ? (id as string) : null;
}

function deliveryIdOf(jobBody: string): string | null {
  const id = (safeJson(jobBody) as { deliveryId?: unknown } | undefined)?.deliveryId;
  return uuid.safeParse(id).success ? (id as string) : null;
}

// The failure callback QStash sends once a job has exhausted its retries
// (QStash callbacks docs). `body` and `sourceBody` are base64.
const failureCallback = z.looseObject({
  status: z.number().int().optional(),
  body: z.string().optional(),
  retried: z.number().int().optional(),
  dlqId: z.string().optional(),
  sourceMessageId: z.string().min(1),
  url: z.string(),
  sourceBody: z.string().optional(),
});

/**
 * The failed job a failure callback's body describes, or null when the body is
 * not QStash's callback shape. The same body reaches us from the route, or from
 * the dead-letter queue when the callback itself ran out of retries.
 */
export function failedJobFromCallback(raw: string): FailedJob | null {
  const parsed = failureCallback.safeParse(safeJson(raw));
  if (!parsed.success) return null;
  const f = parsed.data;
  return {
    messageId: f.sourceMessageId,
    url: f.url,
    body: f.sourceBody === undefined ? "" : base64Text(f.sourceBody),
    status: f.status ?? null,
    responseBody: f.body === undefined ? null : base64Text(f.body),
    retried: f.retried ?? null,
    dlqId: f.dlqId ?? null,
  };
}

/**
 * Base64 as text. Invalid UTF-8 is kept readable (U+FFFD) rather than rejected,
 * and text that is not base64 is kept as it came: the record is for people.
 */
export function base64Text(value: string): string {
  try {
    return new TextDecoder().decode(fromBase64(value));
  } catch {
    return value;
  }
}
