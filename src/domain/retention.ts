import { sql, type SQL } from "drizzle-orm";
import { moreRetentionBatches } from "../outbox/index.ts";
import type { Db } from "./db.ts";
import { countedBy } from "./job-failures/retry.ts";
import { queryRows } from "./webhooks/rows.ts";

/** What a retention pass deletes against: rows older than `olderThanDays` before `now`. */
export interface RetentionCut {
  olderThanDays: number;
  /** The sweep's clock; tests move it instead of waiting days. */
  now: Date;
  /**
   * Batches per table and sweep; the next sweep takes the rest. Unset: as many as
   * fit in RETENTION_BUDGET_MS per table.
   */
  maxBatches?: number;
}

/** Rows per DELETE: bounds each statement's locks and WAL. */
export const RETENTION_BATCH = 500;

/** The tables whose old rows the sweep deletes this way, each keyed by `id`. */
type Table =
  | "webhook_deliveries"
  | "outbox_alerts"
  | "job_failures"
  | "mail_sends"
  | "idempotency_keys"
  | "dashboard_login_failures";

/**
 * Deletes the rows of `table` that `pick` selects (their ids, oldest first, at most
 * `limit`), a batch per statement until a batch comes back short, `maxBatches` are
 * done, or (without `maxBatches`) RETENTION_BUDGET_MS has passed, so a sweep never
 * holds one long transaction and a backlog drains over several sweeps. Answers how
 * many rows went.
 */
export async function deleteInBatches(
  db: Db,
  table: Table,
  pick: (limit: number) => SQL,
  maxBatches?: number,
): Promise<number> {
  let deleted = 0;
  const started = Date.now();
  for (let batch = 0; moreRetentionBatches(batch, started, maxBatches); batch++) {
    const rows = await queryRows<{ n: number }>(
      db,
      sql`WITH gone AS (DELETE FROM ${sql.identifier(table)} WHERE id IN (${pick(RETENTION_BATCH)}) RETURNING 1)
          SELECT count(*)::int AS n FROM gone`,
    );
    const n = rows[0]?.n ?? 0;
    deleted += n;
    if (n < RETENTION_BATCH) break;
  }
  return deleted;
}

/** The cut-off as a timestamptz parameter. */
export function cutoffOf(cut: RetentionCut): Date {
  return new Date(cut.now.getTime() - cut.olderThanDays * 86_400_000);
}

export interface RecordsDeleted {
  alerts: number;
  jobFailures: number;
  mailSends: number;
}

/**
 * Retention for what operators and subscribers leave behind, with the events'
 * RETENTION_DAYS, so these tables stop growing with what happened:
 * - alerts resolved before the cut-off (an open alert stays, however old: it is
 *   still to be looked at);
 * - job failures recorded before it that are settled: retried (its retry delivered,
 *   or sent before the cut-off too), or no longer counted by an open `job.failed`
 *   alert (someone looked and let it be). One nobody has answered stays, with its
 *   body, so it can still be retried; one retried a moment ago stays until its
 *   retry's outcome is in (a walkthrough's 40-day-old failure went 15 s after its
 *   retry was sent, and the retry's own failure lost its link to it);
 * - mails sent before it. Their row turns a repeated job into a no-op, and QStash's
 *   retries are over within days; a retried failure never had one (a mail that
 *   failed commits no row). What it no longer stops: an operator's requeue of an
 *   event whose mail went out before the cut-off sends that mail again.
 */
export async function deleteOldRecords(db: Db, cut: RetentionCut): Promise<RecordsDeleted> {
  const cutoff = cutoffOf(cut);
  const alerts = await deleteInBatches(
    db,
    "outbox_alerts",
    (limit) =>
      sql`SELECT id FROM outbox_alerts WHERE resolved_at < ${cutoff} ORDER BY resolved_at LIMIT ${limit}`,
    cut.maxBatches,
  );
  const jobFailures = await deleteInBatches(
    db,
    "job_failures",
    (limit) => sql`SELECT id FROM job_failures f
                    WHERE f.received_at < ${cutoff} AND NOT ${retryUnderWay(cutoff)}
                      AND (f.retry_message_id IS NOT NULL
                           OR NOT EXISTS (SELECT 1 FROM outbox_alerts a
                                           WHERE a.kind = 'job.failed' AND a.resolved_at IS NULL
                                             AND ${countedBy(sql.raw("a"), sql.raw("f"))}))
                    ORDER BY f.received_at LIMIT ${limit}`,
    cut.maxBatches,
  );
  const mailSends = await deleteInBatches(
    db,
    "mail_sends",
    (limit) => sql`SELECT id FROM mail_sends WHERE created_at < ${cutoff} ORDER BY created_at LIMIT ${limit}`,
    cut.maxBatches,
  );
  return { alerts, jobFailures, mailSends };
}

/**
 * A job failure whose retry was sent after `cutoff` and not delivered yet: QStash may
 * still hold it, and if it fails for good its failure names this one.
 */
function retryUnderWay(cutoff: Date): SQL {
  return sql`(f.retry_message_id IS NOT NULL AND f.retry_delivered_at IS NULL AND f.retried_at >= ${cutoff})`;
}
