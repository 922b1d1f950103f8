import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { republish } from "./republish.ts";
import { queryRows } from "./rows.ts";

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
  return db.transaction(async (tx) => {
    const endpoint = await enabledEndpoint(tx, endpointId, "recover deliveries of");
    // One over the batch, locked like the rest, only to tell whether more remain.
    const failed = await queryRows<{ id: string }>(
      tx,
      sql`SELECT id FROM webhook_deliveries
           WHERE endpoint_id = ${endpoint.id} AND status = 'failed' AND created_at >= ${since}
             AND scope IS NOT DISTINCT FROM ${endpoint.scope}
           ORDER BY created_at, id LIMIT ${RECOVER_BATCH + 1} FOR UPDATE`,
    );
    const ids = failed.slice(0, RECOVER_BATCH).map((r) => r.id);
    if (ids.length === 0) return { recovered: 0, more: false };
    const batch = await queryRows<{ id: string; event_id: string; endpoint_id: string }>(
      tx,
      sql`UPDATE webhook_deliveries
             SET status = 'pending', failed_at = NULL, lease_until = NULL, next_attempt_at = NULL,
                 last_error = NULL, message_id = NULL
           WHERE id = ANY(${`{${ids.join(",")}}`}::uuid[])
       RETURNING id, event_id, endpoint_id`,
    );
    await republish(tx, queue, batch);
    return { recovered: batch.length, more: failed.length > RECOVER_BATCH };
  });
}
