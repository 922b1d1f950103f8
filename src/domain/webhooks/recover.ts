import { sql } from "drizzle-orm";
import { z } from "zod";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { republish, RESEND_BEFORE, type Resend } from "./republish.ts";
import { queryRows, uuidArray } from "./rows.ts";

/**
 * When a recover starts from, as the admin route and the CLI take it: an ISO 8601
 * time with its offset. A missing one is said to be required, not malformed.
 */
export const recoverSince = z.iso.datetime({
  offset: true,
  error: (issue) =>
    issue.input === undefined
      ? "is required: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z"
      : "must be an ISO 8601 time with its offset, e.g. 2026-01-31T12:00:00Z",
});

/** One request re-sends at most this many deliveries; `more` says to ask again. */
export const RECOVER_BATCH = 500;

/**
 * Re-sends now every delivery of one endpoint created since `since` that has not
 * arrived, oldest first: those that gave up (failed) and those waiting for QStash's
 * next retry, which after a receiver's outage of hours is up to 10 h away (the
 * schedule's later steps), so the operator who fixed it had nothing to recover and
 * its `webhook.endpoint_failing` alert stayed open until then. Left alone: a
 * delivery being attempted right now (its lease), which finishes on its own, and one
 * never attempted, queued in QStash behind the endpoint's deliveries in flight,
 * which a new job would only queue again. A waiting delivery's old job, still
 * scheduled, finds another job carrying it and ends unsent (deliver.ts). Only that
 * endpoint's own deliveries, and only of its scope: recovering can never reach
 * another scope.
 */
export async function recoverDeliveries(
  db: Db,
  queue: DeliverQueue,
  endpointId: string,
  since: Date,
): Promise<{ recovered: number; retrying: number; more: boolean }> {
  const { batch, more } = await db.transaction(async (tx) => {
    const endpoint = await enabledEndpoint(tx, endpointId, "recover deliveries of");
    // One over the batch, locked like the rest, only to tell whether more remain.
    const owed = await queryRows<Resend & { retrying: boolean }>(
      tx,
      sql`SELECT id, event_id, endpoint_id, status = 'pending' AS retrying,
                 ${RESEND_BEFORE}
            FROM webhook_deliveries
           WHERE endpoint_id = ${endpoint.id} AND created_at >= ${since}
             AND (status = 'failed' OR ${waitingForRetry})
             AND scope IS NOT DISTINCT FROM ${endpoint.scope}
           ORDER BY created_at, id LIMIT ${RECOVER_BATCH + 1} FOR UPDATE`,
    );
    const batch = owed.slice(0, RECOVER_BATCH);
    if (batch.length > 0) {
      await tx.execute(sql`
        UPDATE webhook_deliveries
           SET status = 'pending', failed_at = NULL, lease_until = NULL, next_attempt_at = NULL,
               last_error = NULL, message_id = NULL, requested_at = now()
         WHERE id = ANY(${uuidArray(batch.map((r) => r.id))}::uuid[])`);
    }
    return { batch, more: owed.length > RECOVER_BATCH };
  });
  // Published once committed (republish.ts says why).
  await republish(db, queue, batch);
  return { recovered: batch.length, retrying: batch.filter((r) => r.retrying).length, more };
}

/**
 * A delivery whose attempt failed and that waits for its next retry: pending, a retry
 * due (an attempt that fails sets it; a resend, this one included, clears it, so a
 * second recover does not send again what the first just sent), and no attempt under
 * way (an attempt holds the lease while it POSTs).
 */
const waitingForRetry = sql`(status = 'pending' AND next_attempt_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= now()))`;

/** What a recover re-sent, as the CLI and the dashboard say it: "3 deliveries (1 that gave up, 2 waiting for a retry)". */
export function recoveredText(recovered: number, retrying: number): string {
  const n = `${recovered} deliver${recovered === 1 ? "y" : "ies"}`;
  if (retrying === 0) return `${n} that gave up`;
  if (retrying === recovered) return `${n} waiting for a retry`;
  return `${n} (${recovered - retrying} that gave up, ${retrying} waiting for a retry)`;
}
