import { desc, eq, getTableColumns, lt, sql } from "drizzle-orm";
import { alias } from "drizzle-orm/pg-core";
import type { Db } from "../db.ts";
import { keysetPage } from "../../outbox/index.ts";
import { jobFailures } from "../schema.ts";
import { queryRows } from "../webhooks/rows.ts";

export interface JobFailure {
  /** QStash's id of the job that exhausted its retries. */
  messageId: string;
  subscription: string;
  eventId: string | null;
  /** The subscriber's last answer. */
  status: number | null;
  /** The job body as published. */
  body: string;
  responseBody: string | null;
  dlqId: string | null;
  retried: number | null;
}

/**
 * Records jobs that exhausted their retries, each with a `job.failed` alert, in one
 * statement so neither exists without the other. The failure callback is itself
 * delivered at least once, and the sweep's dead letters may repeat it: a message id
 * already recorded (or twice in the batch) adds nothing. Answers the message ids
 * this call recorded. A batch is the cron sweep's dead letters, in one round trip.
 */
export async function recordJobFailures(db: Db, failures: readonly JobFailure[]): Promise<string[]> {
  if (failures.length === 0) return [];
  const input = JSON.stringify(
    failures.map((f) => ({
      message_id: f.messageId,
      subscription: f.subscription,
      event_id: f.eventId,
      status: f.status,
      body: f.body,
      response_body: f.responseBody,
      message: alertMessage(f),
      details: { messageId: f.messageId, status: f.status, dlqId: f.dlqId, retried: f.retried },
    })),
  );
  const rows = await queryRows<{ message_id: string }>(
    db,
    sql`WITH input AS (
          SELECT DISTINCT ON (message_id) *
            FROM jsonb_to_recordset(${input}::jsonb)
                 AS f(message_id text, subscription text, event_id uuid, status int, body text,
                      response_body text, message text, details jsonb)
           ORDER BY message_id
        ),
        recorded AS (
          INSERT INTO job_failures (message_id, subscription, event_id, status, body, response_body)
          SELECT message_id, subscription, event_id, status, body, response_body FROM input
           -- Those recorded already are left out before the insert, not only by its ON
           -- CONFLICT (which stays for a race): each conflicting row took an id, and the
           -- sweep's 71 dead letters of failures the callback had recorded made the ids
           -- jump from 71 to 143, which reads like missing rows.
           WHERE NOT EXISTS (SELECT 1 FROM job_failures j WHERE j.message_id = input.message_id)
          ON CONFLICT (message_id) DO NOTHING
          RETURNING message_id
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
          SELECT 'job.failed', i.event_id, i.subscription, i.message, i.details
            FROM recorded r JOIN input i USING (message_id)
        )
        SELECT message_id FROM recorded`,
  );
  return rows.map((r) => r.message_id);
}

/** recordJobFailures for the one job a failure callback names. */
export async function recordJobFailure(db: Db, f: JobFailure): Promise<{ recorded: boolean }> {
  return { recorded: (await recordJobFailures(db, [f])).length > 0 };
}

function alertMessage(f: JobFailure): string {
  const retries =
    f.retried === null ? "all its retries" : `${f.retried} ${f.retried === 1 ? "retry" : "retries"}`;
  const answer = f.status === null ? "no answer" : `last status ${f.status}`;
  const cause = causeOf(f.responseBody, ALERT_CAUSE_MAX);
  return `job ${f.messageId} for ${f.subscription} failed after ${retries} (${answer}${cause ? `: ${cause}` : ""})`;
}

/** Characters of a failed job's cause in its alert's message. */
const ALERT_CAUSE_MAX = 160;

/**
 * What a job's last answer said went wrong, on one line and at most `max`
 * characters: our job routes answer `{"error":{"message":…}}` (the mail provider's
 * "mail API answered 503: …"), so that message; any other body as it is; null for
 * none. The status alone is our own route's 500, which names no cause: a walkthrough
 * saw 71 alerts "last status 500" for one mail provider's outage, and an operator
 * reading them would suspect the Worker.
 */
export function causeOf(responseBody: string | null, max: number): string | null {
  if (!responseBody?.trim()) return null;
  let said: unknown = responseBody;
  try {
    said =
      (JSON.parse(responseBody) as { error?: { message?: unknown } } | null)?.error?.message ?? responseBody;
  } catch {
    // Not JSON (a proxy's HTML, a plain text answer): the body itself.
  }
  const line = String(said).replace(/\s+/g, " ").trim();
  if (!line) return null;
  return line.length > max ? `${line.slice(0, max)}…` : line;
}

/** A job's last answer as operators read it: `500: mail API answered 503: …`, or "no answer". */
export function lastAnswerOf(f: { status: number | null; responseBody: string | null }, max: number): string {
  const status = f.status === null ? "no answer" : String(f.status);
  const cause = causeOf(f.responseBody, max);
  return cause ? `${status}: ${cause}` : status;
}

/**
 * Newest first, for operators, each with how its retry went as far as we know:
 * `failedAgainId` is the failure recorded for its retried job (it ran out of
 * retries too), `retryOfId` the failure this one's job was a retry of, and
 * `retryDeliveredAt` when its retried job's route took it (the retry worked). A
 * retried failure with neither is still in QStash's hands (or was published by a
 * version that did not say when it was delivered). `before` pages by id (keyset):
 * only failures older than that one.
 */
export async function listJobFailures(db: Db, options: { limit?: number; before?: number } = {}) {
  const again = alias(jobFailures, "again");
  const original = alias(jobFailures, "original");
  return db
    .select({ ...getTableColumns(jobFailures), failedAgainId: again.id, retryOfId: original.id })
    .from(jobFailures)
    .leftJoin(again, eq(again.messageId, jobFailures.retryMessageId))
    .leftJoin(original, eq(original.retryMessageId, jobFailures.messageId))
    .where(options.before === undefined ? undefined : lt(jobFailures.id, options.before))
    .orderBy(desc(jobFailures.id))
    .limit(options.limit ?? 50);
}

export type JobFailureRow = Awaited<ReturnType<typeof listJobFailures>>[number];

/** listJobFailures a page at a time, with the cursor of the next: the admin route's and the CLI's. */
export async function jobFailuresPage(
  db: Db,
  options: { limit?: number; before?: number } = {},
): Promise<{ jobFailures: JobFailureRow[]; nextBefore: number | null }> {
  const limit = options.limit ?? 50;
  const found = await listJobFailures(db, { ...options, limit: limit + 1 });
  const { rows: jobFailures, nextBefore } = keysetPage(found, limit, (f) => f.id);
  return { jobFailures, nextBefore };
}
