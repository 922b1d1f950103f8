import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { recordMessageIds } from "./fanout.ts";

/**
 * Publishes fresh deliver jobs for deliveries an operator put back to pending,
 * inside the caller's transaction: if publishing fails, the rows roll back to
 * what they were and the operator simply asks again. Each job gets a new
 * deduplication id (the fan-out's, plus a random suffix), or QStash would drop
 * it as the original; the `webhook-id` a receiver sees stays the event id.
 */
export async function republish(
  tx: Db,
  queue: DeliverQueue,
  rows: { id: string; event_id: string; endpoint_id: string }[],
): Promise<void> {
  if (rows.length === 0) return;
  const messageIds = await queue.enqueue(
    rows.map((r) => ({
      deliveryId: r.id,
      deduplicationId: `${r.event_id}:${r.endpoint_id}:resend-${crypto.randomUUID()}`,
    })),
  );
  await recordMessageIds(
    tx,
    rows.map((r) => r.id),
    messageIds,
  );
}
