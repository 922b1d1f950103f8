import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { cutoffOf, deleteInBatches, type RetentionCut } from "../retention.ts";
import type { DeliverQueue, QStashMessages } from "./deliver-queue.ts";
import { recordMessageIds } from "./fanout.ts";
import { enqueueAgain } from "./republish.ts";
import { queryRows, uuidArray } from "./rows.ts";

/**
 * Minutes a delivery may stay pending without a job before the sweep publishes
 * it again. A publish normally follows its commit within milliseconds; a fan-out
 * job that died in between is retried by QStash within seconds. Well past both,
 * the row's publish was lost: an operator's redeliver, recover or test request
 * that died after its commit, or a fan-out job QStash gave up on.
 */
export const UNPUBLISHED_AFTER_MINUTES = 5;

/** Rows one sweep publishes per statement; the next sweep takes the rest. */
export const SWEEP_BATCH = 500;

/**
 * The cron sweep's repair for a lost publish: deliveries pending without a
 * message id since before `now - UNPUBLISHED_AFTER_MINUTES` get a new job each.
 * The rows are taken (SKIP LOCKED, so two sweeps share them out) and stamped
 * with `now` before publishing, so a publish that fails again is retried by a
 * later sweep, not this one's neighbour. A second job for a row whose first job
 * turns up after all is harmless: delivery takes a lease on the row, and a
 * delivered row is not sent again.
 */
export async function publishUnpublished(db: Db, queue: DeliverQueue, now: Date): Promise<number> {
  return takeAndPublish(
    db,
    queue,
    now,
    sql`message_id IS NULL
        AND requested_at < ${now}::timestamptz - make_interval(mins => ${UNPUBLISHED_AFTER_MINUTES})`,
  );
}

/**
 * Takes up to SWEEP_BATCH pending deliveries that match `where` (SKIP LOCKED, so
 * two sweeps share them out), stamps them `requested_at = now` with no retry due,
 * and gives each a new deliver job. The stamp comes first, so a publish that
 * fails leaves the rows to a later sweep.
 */
async function takeAndPublish(db: Db, queue: DeliverQueue, now: Date, where: SQL): Promise<number> {
  const rows = await queryRows<{ id: string; event_id: string; endpoint_id: string }>(
    db,
    sql`UPDATE webhook_deliveries d SET requested_at = ${now}, next_attempt_at = NULL
          FROM (SELECT id FROM webhook_deliveries
                 WHERE status = 'pending' AND ${where}
                 ORDER BY requested_at
                 LIMIT ${SWEEP_BATCH}
                 FOR UPDATE SKIP LOCKED) due
         WHERE d.id = due.id
        RETURNING d.id, d.event_id, d.endpoint_id`,
  );
  if (rows.length === 0) return 0;
  const messageIds = await enqueueAgain(queue, rows, "sweep");
  await recordMessageIds(
    db,
    rows.map((r) => r.id),
    messageIds,
  );
  return rows.length;
}

/**
 * Minutes past its due time after which a pending delivery's job is taken to be
 * lost. QStash comes back when the deliver job asked it to (its Retry-After), give or
 * take seconds; half an hour later the job is gone: a message deleted from QStash's
 * console, the local QStash dev server's queue file deleted (ADR 0029).
 */
export const OVERDUE_AFTER_MINUTES = 30;

/** Overdue deliveries one sweep asks QStash about: a request each, within a sweep's subrequests. */
export const OVERDUE_CHECKS_PER_SWEEP = 50;

/**
 * The cron sweep's repair for a lost job, as publishUnpublished's for a lost
 * publish. Overdue: a pending, unleased delivery with a job whose retry was due
 * (`next_attempt_at`), or whose job was published with no attempt since
 * (`requested_at`), more than OVERDUE_AFTER_MINUTES ago. A delivery whose retries
 * are spent (attempted since its publish, no retry due) is not overdue: QStash's
 * failure callback fails it, or, when the callback never reached us, the sweep's
 * reading of the dead-letter queue (collectDeadLetters). Late is not lost: a recover of thousands to a slow
 * receiver waits behind flow control for hours, and a new job each would double
 * that queue. So QStash is asked about each overdue job (up to
 * OVERDUE_CHECKS_PER_SWEEP, oldest first). One it still holds is left to it, and
 * looked at again OVERDUE_AFTER_MINUTES later; one it no longer holds (a message
 * deleted in its console, a restarted dev server) gets a new job, taken and stamped
 * like publishUnpublished's rows. The new job's retries start over, as an
 * operator's redeliver's do; the old job's failure callback no longer matches the
 * row's message id. Answers how many got a new job.
 */
export async function publishOverdue(
  db: Db,
  queue: DeliverQueue,
  messages: QStashMessages,
  now: Date,
): Promise<number> {
  const late = sql`${now}::timestamptz - make_interval(mins => ${OVERDUE_AFTER_MINUTES})`;
  const overdue = sql`message_id IS NOT NULL
        AND (lease_until IS NULL OR lease_until < ${now})
        AND (next_attempt_at < ${late}
             OR (next_attempt_at IS NULL AND requested_at < ${late}
                 AND (last_attempt_at IS NULL OR last_attempt_at < requested_at)))`;
  const candidates = await queryRows<{ id: string; message_id: string }>(
    db,
    sql`SELECT id, message_id FROM webhook_deliveries
         WHERE status = 'pending' AND ${overdue}
         ORDER BY requested_at LIMIT ${OVERDUE_CHECKS_PER_SWEEP}`,
  );
  const held: string[] = [];
  const lost: string[] = [];
  for (const c of candidates) ((await messages.holds(c.message_id)) ? held : lost).push(c.id);
  if (held.length > 0) {
    await db.execute(sql`
      UPDATE webhook_deliveries
         SET next_attempt_at = CASE WHEN next_attempt_at IS NULL THEN NULL ELSE ${now}::timestamptz END,
             requested_at = CASE WHEN next_attempt_at IS NULL THEN ${now}::timestamptz ELSE requested_at END
       WHERE id = ANY(${uuidArray(held)}::uuid[]) AND status = 'pending'`);
  }
  if (lost.length === 0) return 0;
  return takeAndPublish(db, queue, now, sql`id = ANY(${uuidArray(lost)}::uuid[]) AND ${overdue}`);
}

/**
 * Retention for the delivery log, with the events' RETENTION_DAYS: finished
 * deliveries (delivered or failed) created before the cut-off go, their attempts
 * with them (ON DELETE CASCADE). Pending ones stay whatever their age, and so do
 * failed ones while their endpoint's open `webhook.delivery_failed` alert counts
 * them as owed (recover re-sends them): a walkthrough's open alert said 456 had
 * failed while recover found none, as job failures stay while their alert is open.
 * Bounded batches, so one sweep never holds a long transaction; a backlog drains
 * over several sweeps.
 */
export async function deleteOldDeliveries(db: Db, cut: RetentionCut): Promise<number> {
  const cutoff = cutoffOf(cut);
  return deleteInBatches(
    db,
    "webhook_deliveries",
    (limit) => sql`SELECT id FROM webhook_deliveries d
                    WHERE status <> 'pending' AND created_at < ${cutoff}
                      AND NOT (status = 'failed' AND EXISTS (
                            SELECT 1 FROM outbox_alerts a
                             WHERE a.kind = 'webhook.delivery_failed' AND a.resolved_at IS NULL
                               AND a.details->>'endpointId' = d.endpoint_id::text))
                    ORDER BY created_at LIMIT ${limit}`,
    cut.maxBatches,
  );
}
