import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { republish } from "./republish.ts";
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
  return db.transaction(async (tx) => {
    const [delivery] = await queryRows<{ endpoint_id: string }>(
      tx,
      sql`SELECT endpoint_id FROM webhook_deliveries WHERE id = ${deliveryId}`,
    );
    if (!delivery) throw new NotFoundError("webhook delivery", deliveryId);
    await enabledEndpoint(tx, delivery.endpoint_id, "redeliver to");
    const rows = await queryRows<{ id: string; event_id: string; endpoint_id: string }>(
      tx,
      sql`UPDATE webhook_deliveries d
             SET status = 'pending', failed_at = NULL, delivered_at = NULL, lease_until = NULL,
                 next_attempt_at = NULL, last_error = NULL, message_id = NULL
            FROM webhook_endpoints e
           WHERE d.id = ${deliveryId} AND e.id = d.endpoint_id AND e.scope IS NOT DISTINCT FROM d.scope
       RETURNING d.id, d.event_id, d.endpoint_id`,
    );
    await republish(tx, queue, rows);
    return { deliveryId };
  });
}
