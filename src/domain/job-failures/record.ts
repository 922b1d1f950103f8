import { desc, eq, getTableColumns, lt, sql } from "drizzle-orm";
import { alias } from "drizzle-orm/pg-core";
import type { Db } from "../db.ts";
import { keysetPage } from "../../outbox/index.ts";
import { jobFailures } from "../schema.ts";

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
 * Records a job that exhausted its retries and raises a `job.failed` alert, in one
 * statement so neither exists without the other. The failure callback is itself
 * delivered at least once: a repeat finds the message id taken and adds nothing.
 */
export async function recordJobFailure(db: Db, f: JobFailure): Promise<{ recorded: boolean }> {
  const retries =
    f.retried === null ? "all its retries" : `${f.retried} ${f.retried === 1 ? "retry" : "retries"}`;
  const answer = f.status === null ? "no answer" : `last status ${f.status}`;
  const message = `job ${f.messageId} for ${f.subscription} failed after ${retries} (${answer})`;
  const details = JSON.stringify({
    messageId: f.messageId,
    status: f.status,
    dlqId: f.dlqId,
    retried: f.retried,
  });
  const result = await db.execute(sql`
    WITH recorded AS (
      INSERT INTO job_failures (message_id, subscription, event_id, status, body, response_body)
      VALUES (${f.messageId}, ${f.subscription}, ${f.eventId}, ${f.status}, ${f.body}, ${f.responseBody})
      ON CONFLICT (message_id) DO NOTHING
      RETURNING id
    )
    INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
    SELECT 'job.failed', ${f.eventId}::uuid, ${f.subscription}, ${message}, ${details}::jsonb FROM recorded
    RETURNING id`);
  return { recorded: (result as unknown as { rows: unknown[] }).rows.length > 0 };
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
