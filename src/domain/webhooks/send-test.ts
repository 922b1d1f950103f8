import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { webhookBody } from "./payload.ts";
import { republish } from "./republish.ts";
import { queryRows } from "./rows.ts";

export const TEST_EVENT_TYPE = "webhook.test";

/**
 * Sends a `webhook.test` event to one endpoint only. It is not recorded as an
 * event (fan-out would offer it to every endpoint of the scope); it is a
 * delivery row of its own, in the endpoint's scope, signed and retried like any.
 */
export async function sendTestEvent(
  db: Db,
  queue: DeliverQueue,
  endpointId: string,
): Promise<{ deliveryId: string; eventId: string }> {
  return db.transaction(async (tx) => {
    const endpoint = await enabledEndpoint(tx, endpointId, "send a test event to");
    const eventId = crypto.randomUUID();
    const body = webhookBody({
      id: eventId,
      type: TEST_EVENT_TYPE,
      subject: endpoint.id,
      scope: endpoint.scope,
      payload: { message: "A test event sent by an operator." },
      createdAt: new Date().toISOString(),
    });
    const [row] = await queryRows<{ id: string; event_id: string; endpoint_id: string }>(
      tx,
      sql`INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body)
          VALUES (${endpoint.id}, ${eventId}, ${TEST_EVENT_TYPE}, ${endpoint.scope}, ${body})
          RETURNING id, event_id, endpoint_id`,
    );
    await republish(tx, queue, [row!]);
    return { deliveryId: row!.id, eventId };
  });
}
