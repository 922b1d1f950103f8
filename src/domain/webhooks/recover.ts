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
 * Re-sends every failed delivery of one endpoint created since `since` (after
 * an outage at the receiver, say), oldest first. Only that endpoint's own
 * deliveries, and only of its scope: recovering can never reach another scope.
 */
export async function recoverFailed(
  db: Db,
  queue: DeliverQueue,
  endpointId: string,
  since: Date,
): Promise<{ recovered: number; more: boolean }> {
  const { batch, more } = await db.transaction(async (tx) => {
    const endpoint = await enabledEndpoint(tx, endpointId, "recover deliveries of");
    // One over the batch, locked like the rest, only to tell whether more remain.
    const failed = await queryRows<Resend>(
      tx,
      sql`SELECT id, event_id, endpoint_id,
                 ${RESEND_BEFORE}
            FROM webhook_deliveries
           WHERE endpoint_id = ${endpoint.id} AND status = 'failed' AND created_at >= ${since}
             AND scope IS NOT DISTINCT FROM ${endpoint.scope}
           ORDER BY created_at, id LIMIT ${RECOVER_BATCH + 1} FOR UPDATE`,
    );
    const batch = failed.slice(0, RECOVER_BATCH);
    if (batch.length > 0) {
      await tx.execute(sql`
        UPDATE webhook_deliveries
           SET status = 'pending', failed_at = NULL, lease_until = NULL, next_attempt_at = NULL,
               last_error = NULL, message_id = NULL, requested_at = now()
         WHERE id = ANY(${uuidArray(batch.map((r) => r.id))}::uuid[])`);
    }
    return { batch, more: failed.length > RECOVER_BATCH };
  });
  // Published once committed (republish.ts says why).
  await republish(db, queue, batch);
  return { recovered: batch.length, more };
}
