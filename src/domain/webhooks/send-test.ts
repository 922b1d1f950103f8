import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { enabledEndpoint } from "./endpoint-state.ts";
import { webhookBody } from "./payload.ts";
import { recordMessageIds } from "./fanout.ts";
import { IllegalTransitionError } from "../errors.ts";
import { queryRows } from "./rows.ts";

export const TEST_EVENT_TYPE = "webhook.test";

/**
 * The event an alert about delivery row `d` names: none for an operator's test
 * event, which is no event the outbox holds (its alert linked to a page that is a 404).
 */
export function alertEventIdOf(d: SQL): SQL {
  return sql`CASE WHEN ${d}.event_type = ${TEST_EVENT_TYPE} THEN NULL ELSE ${d}.event_id END`;
}

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
  const endpoint = await enabledEndpoint(db, endpointId, "send a test event to");
  const eventId = crypto.randomUUID();
  const body = webhookBody({
    id: eventId,
    type: TEST_EVENT_TYPE,
    subject: endpoint.id,
    scope: endpoint.scope,
    payload: { message: "A test event sent by an operator." },
    createdAt: new Date().toISOString(),
  });
  // Committed before its job is published: QStash may deliver the job at once.
  const [row] = await queryRows<{ id: string }>(
    db,
    sql`INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body)
        SELECT id, ${eventId}, ${TEST_EVENT_TYPE}, scope, ${body}
          FROM webhook_endpoints WHERE id = ${endpoint.id} AND enabled
        RETURNING id`,
  );
  if (!row)
    throw new IllegalTransitionError(
      "webhook endpoint",
      endpointId,
      "disabled",
      "send a test event to",
      "enable it first",
    );
  try {
    const [messageId] = await queue.enqueue([
      { deliveryId: row.id, endpointId: endpoint.id, deduplicationId: `${eventId}:${endpoint.id}` },
    ]);
    await recordMessageIds(db, [row.id], [messageId!]);
  } catch (error) {
    // Nothing was sent: the test event should not linger as a pending delivery.
    await db.execute(sql`DELETE FROM webhook_deliveries WHERE id = ${row.id} AND message_id IS NULL`);
    throw error;
  }
  return { deliveryId: row.id, eventId };
}
