import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { republish, RESEND_BEFORE, type Resend } from "./republish.ts";
import { queryRows } from "./rows.ts";

/**
 * Sends one delivery again, whatever its state: the same body and `webhook-id`
 * (receivers deduplicate on it), a new job. Its endpoint must be enabled.
 */
export async function redeliver(
  db: Db,
  queue: DeliverQueue,
  deliveryId: string,
): Promise<{ deliveryId: string }> {
  const rows = await db.transaction(async (tx) => {
    const [delivery] = await queryRows<Resend>(
      tx,
      sql`SELECT id, event_id, endpoint_id,
                 ${RESEND_BEFORE}
            FROM webhook_deliveries WHERE id = ${deliveryId} FOR UPDATE`,
    );
    if (!delivery) throw new NotFoundError("webhook delivery", deliveryId);
    const endpoint = await enabledEndpoint(tx, delivery.endpoint_id, "redeliver to");
    // The scope check can only fail on a row written by hand; then there is nothing to send.
    const reset = await queryRows<{ id: string }>(
      tx,
      sql`UPDATE webhook_deliveries
             SET status = 'pending', failed_at = NULL, delivered_at = NULL, lease_until = NULL,
                 next_attempt_at = NULL, last_error = NULL, message_id = NULL, requested_at = now()
           WHERE id = ${deliveryId} AND scope IS NOT DISTINCT FROM ${endpoint.scope}
       RETURNING id`,
    );
    return reset.length === 1 ? [delivery] : [];
  });
  await republish(db, queue, rows);
  return { deliveryId };
}
