import { and, desc, eq, getTableColumns, inArray, lt, sql, type SQL } from "drizzle-orm";
import { alias } from "drizzle-orm/pg-core";
import type { Db } from "../db.ts";
import { keysetPage, PAGE_PAYLOAD_BYTES } from "../../outbox/index.ts";
import { jobFailures } from "../schema.ts";
import { isoTime, queryRows } from "../webhooks/rows.ts";

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
 * The alert's words, from its count, subscription and the latest failure's details:
 * one expression for a new alert and for one that folds in more, so both read alike.
 * One failure reads as it always has ("job msg_… for notify.mail failed after 3
 * retries (last status 500: …)"); more say how many first.
 */
function alertMessage(count: SQL, subscription: SQL, details: SQL): SQL {
  const retried = sql`(${details}->>'retried')`;
  const failed = sql`' failed after '
    || CASE WHEN ${retried} IS NULL THEN 'all its retries' WHEN ${retried} = '1' THEN '1 retry'
            ELSE ${retried} || ' retries' END
    || ' (' || coalesce('last status ' || (${details}->>'status'), 'no answer')
    || coalesce(': ' || (${details}->>'cause'), '') || ')'`;
  // With what answers it (the alert walkthrough found it naming no next step).
  return sql`CASE WHEN ${count} = 1
    THEN 'job ' || (${details}->>'messageId') || ' for ' || ${subscription} || ${failed}
    ELSE ${count} || ' jobs for ' || ${subscription} || ' ran out of retries; the latest: job '
         || (${details}->>'messageId') || ${failed} END
    -- Not a subscriber down: the job route refused QStash's delivery itself (keys, PUBLIC_URL).
    || CASE WHEN ${details}->>'status' = '401'
            THEN '. A 401 is this Worker refusing QStash''s delivery: check QSTASH_CURRENT_SIGNING_KEY, '
                 || 'QSTASH_NEXT_SIGNING_KEY and that PUBLIC_URL is this Worker''s'
            ELSE '' END
    || '. Once the subscriber works, Retry on the job failures page (job-failures retry) sends '
    || CASE WHEN ${count} = 1 THEN 'it' ELSE 'them' END || ' again'`;
}

/**
 * Records jobs that exhausted their retries, each counted by its subscription's one
 * open `job.failed` alert (raised when there is none), in one statement so no
 * failure exists without an alert that counted it. One alert per subscription, not
 * per job (ADR 0037): a subscriber that is down fails every job it is sent, and a
 * mail provider's outage raised one alert per mail. The alert counts (`count`),
 * dates (`firstFailedAt`, `lastFailedAt`) and names the latest failure (`failureId`,
 * `messageId`, `status`, `cause`, `dlqId`, `retried`, and the alert's event), as the
 * endpoint's delivery-failure alert does (ADR 0031): the open alert is updated where
 * there is one, only the first failure inserts (an insert that ends in its conflict
 * clause takes an id all the same), and ON CONFLICT covers a failure of another
 * connection raising it after this statement's snapshot.
 *
 * The failure callback is itself delivered at least once, and the sweep's dead
 * letters may repeat it: a message id already recorded (or twice in the batch)
 * adds nothing and counts nothing. Answers the message ids this call recorded. A
 * batch is the cron sweep's dead letters, in one round trip.
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
      details: {
        messageId: f.messageId,
        status: f.status,
        cause: causeOf(f.responseBody, ALERT_CAUSE_MAX),
        dlqId: f.dlqId,
        retried: f.retried,
      },
    })),
  );
  // An open alert's details (`was`) with a batch's failures (`more`) folded in: the
  // count added up, the rest the latest failure's, the first failure's time kept. An
  // alert raised by a version before this one has no count: it counted one failure.
  const fold = (was: SQL, more: SQL, subscription: SQL) => {
    const count = sql`(coalesce((${was}->>'count')::int, 1) + (${more}->>'count')::int)`;
    return sql`message = ${alertMessage(count, subscription, more)},
               details = ${was} || (${more} - 'firstFailedAt') || jsonb_build_object('count', ${count})`;
  };
  const rows = await queryRows<{ message_id: string }>(
    db,
    sql`WITH input AS (
          SELECT DISTINCT ON (message_id) *
            FROM jsonb_to_recordset(${input}::jsonb)
                 AS f(message_id text, subscription text, event_id uuid, status int, body text,
                      response_body text, details jsonb)
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
          RETURNING id, message_id
        ),
        latest AS (
          SELECT DISTINCT ON (i.subscription) i.subscription, i.event_id,
                 i.details || jsonb_build_object('failureId', r.id,
                                                 'count', count(*) OVER (PARTITION BY i.subscription),
                                                 'firstFailedAt', ${isoTime(sql`now()`)},
                                                 'lastFailedAt', ${isoTime(sql`now()`)}) AS details
            FROM recorded r JOIN input i USING (message_id)
           ORDER BY i.subscription, r.id DESC
        ),
        folded AS (
          UPDATE outbox_alerts a
             SET event_id = l.event_id, ${fold(sql.raw("a.details"), sql.raw("l.details"), sql.raw("a.subscription"))}
            FROM latest l
           WHERE a.kind = 'job.failed' AND a.resolved_at IS NULL AND a.subscription = l.subscription
          RETURNING l.subscription
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
          SELECT 'job.failed', event_id, subscription,
                 ${alertMessage(sql.raw("(details->>'count')::int"), sql.raw("subscription"), sql.raw("details"))}, details
            FROM latest WHERE subscription NOT IN (SELECT subscription FROM folded)
          ON CONFLICT (subscription) WHERE resolved_at IS NULL AND kind = 'job.failed'
          DO UPDATE SET event_id = EXCLUDED.event_id,
                        ${fold(sql.raw("outbox_alerts.details"), sql.raw("EXCLUDED.details"), sql.raw("outbox_alerts.subscription"))}
          RETURNING 1
        ),
        settled AS (
          -- A job that ran out of retries is owed none (ADR 0038), whether or not its
          -- last attempt's failure reached the job route.
          DELETE FROM job_retries_due d USING input i WHERE d.message_id = i.message_id
        )
        SELECT message_id FROM recorded`,
  );
  return rows.map((r) => r.message_id);
}

/** recordJobFailures for the one job a failure callback names. */
export async function recordJobFailure(db: Db, f: JobFailure): Promise<{ recorded: boolean }> {
  return { recorded: (await recordJobFailures(db, [f])).length > 0 };
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
 * only failures older than that one; `eventId`: only that event's; `subscription`:
 * only that subscription's.
 */
export async function listJobFailures(db: Db, options: ListJobFailuresOptions = {}) {
  return (await jobFailureRows(db, options)).rows;
}

interface ListJobFailuresOptions {
  limit?: number;
  before?: number;
  eventId?: string;
  subscription?: string;
  /** PAGE_PAYLOAD_BYTES, smaller for a test. */
  pageBytes?: number;
}

/**
 * listJobFailures's rows, and whether the byte budget cut them short. The sizes are
 * read first (octet_length reads a text's stored length, not the body), so the bodies
 * past the budget are never fetched; the first row always comes.
 */
async function jobFailureRows(
  db: Db,
  options: ListJobFailuresOptions,
): Promise<{ rows: Awaited<ReturnType<typeof jobFailuresByIds>>; cut: boolean }> {
  const sizes = await db
    .select({ id: jobFailures.id, bytes: sql<number>`octet_length(${jobFailures.body})`.mapWith(Number) })
    .from(jobFailures)
    .where(
      and(
        options.before === undefined ? undefined : lt(jobFailures.id, options.before),
        options.eventId === undefined ? undefined : eq(jobFailures.eventId, options.eventId),
        options.subscription === undefined ? undefined : eq(jobFailures.subscription, options.subscription),
      ),
    )
    .orderBy(desc(jobFailures.id))
    .limit(options.limit ?? 50);
  // The events pages' budget (ADR 0042): a body is a whole job, up to ~1 MB, as an event is.
  const budget = options.pageBytes ?? PAGE_PAYLOAD_BYTES;
  const kept: number[] = [];
  let bytes = 0;
  for (const size of sizes) {
    if (kept.length > 0 && bytes >= budget) break;
    kept.push(size.id);
    bytes += size.bytes;
  }
  return { rows: await jobFailuresByIds(db, kept), cut: kept.length < sizes.length };
}

function jobFailuresByIds(db: Db, ids: number[]) {
  const again = alias(jobFailures, "again");
  const original = alias(jobFailures, "original");
  return db
    .select({ ...getTableColumns(jobFailures), failedAgainId: again.id, retryOfId: original.id })
    .from(jobFailures)
    .leftJoin(again, eq(again.messageId, jobFailures.retryMessageId))
    .leftJoin(original, eq(original.retryMessageId, jobFailures.messageId))
    .where(inArray(jobFailures.id, ids))
    .orderBy(desc(jobFailures.id));
}

export type JobFailureRow = Awaited<ReturnType<typeof listJobFailures>>[number];

/** An event's failed jobs its views list (a subscription's each, and each retry that failed again). */
export const EVENT_JOB_FAILURES_SHOWN = 50;

/**
 * An event's own failed jobs, newest first, for its page, `events show` and
 * `GET /admin/events/:id`: the subscription's one `job.failed` alert names only the
 * latest event it counts (ADR 0037).
 */
export function eventJobFailures(db: Db, eventId: string): Promise<JobFailureRow[]> {
  return listJobFailures(db, { eventId, limit: EVENT_JOB_FAILURES_SHOWN });
}

/** listJobFailures a page at a time, with the cursor of the next: the admin route's and the CLI's. */
export async function jobFailuresPage(
  db: Db,
  options: Omit<ListJobFailuresOptions, "eventId"> = {},
): Promise<{ jobFailures: JobFailureRow[]; nextBefore: number | null }> {
  const limit = options.limit ?? 50;
  const { rows: found, cut } = await jobFailureRows(db, { ...options, limit: limit + 1 });
  // Cut short by the byte budget: the rows left out are the next page's.
  if (cut) return { jobFailures: found, nextBefore: found.at(-1)!.id };
  const { rows: jobFailures, nextBefore } = keysetPage(found, limit, (f) => f.id);
  return { jobFailures, nextBefore };
}
