import { sql } from "drizzle-orm";
import { matchesGlob } from "../../outbox/index.ts";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { webhookBody, type WebhookEvent } from "./payload.ts";
import { queryRows, textArray, uuidArray } from "./rows.ts";

export interface FanoutResult {
  /** Enabled endpoints of the event's scope whose globs match its type. */
  matched: number;
  /** Delivery rows this call created (0 when a replayed job finds them made). */
  created: number;
  /** Deliver jobs published by this call. */
  published: number;
}

/**
 * `webhook.fanout`: one delivery row per (matching endpoint, event) and one
 * `webhook.deliver` job per row. Safe to run any number of times for an event:
 * - the (endpoint, event) key makes a replay create nothing twice;
 * - a row records the message id of its job once published, and every run
 *   publishes the pending rows still without one, so a crash between the insert
 *   and the publish is repaired by QStash's retry of this job;
 * - the deduplication id `<event id>:<endpoint id>` makes QStash drop a publish
 *   that succeeded before a crash kept its message id from being recorded.
 * A failed publish throws: the fan-out job fails and QStash retries it.
 */
export async function fanOutWebhook(db: Db, queue: DeliverQueue, event: WebhookEvent): Promise<FanoutResult> {
  const endpoints = await queryRows<{ id: string; types: string[] }>(
    db,
    sql`SELECT id, types FROM webhook_endpoints
         WHERE enabled AND scope IS NOT DISTINCT FROM ${event.scope}`,
  );
  // The same glob semantics as subscriptions, so `note.*` means one thing everywhere.
  const matched = endpoints.filter((e) => e.types.some((glob) => matchesGlob(glob, event.type)));
  const ids = matched.map((e) => e.id);

  // The CTE's insert is invisible to the SELECT beside it (one snapshot), so the
  // union is: rows made now, plus rows an earlier run made but never published.
  const toPublish = await queryRows<{ id: string; endpoint_id: string; created: boolean }>(
    db,
    sql`WITH created AS (
          INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body)
          SELECT endpoint_id, ${event.id}, ${event.type}, ${event.scope}, ${webhookBody(event)}
            FROM unnest(${uuidArray(ids)}::uuid[]) AS endpoint_id
          ON CONFLICT (endpoint_id, event_id) DO NOTHING
          RETURNING id, endpoint_id
        )
        SELECT id, endpoint_id, true AS created FROM created
        UNION ALL
        SELECT id, endpoint_id, false FROM webhook_deliveries
         WHERE event_id = ${event.id} AND status = 'pending' AND message_id IS NULL`,
  );
  if (toPublish.length === 0) return { matched: matched.length, created: 0, published: 0 };

  const messageIds = await queue.enqueue(
    toPublish.map((d) => ({
      deliveryId: d.id,
      endpointId: d.endpoint_id,
      deduplicationId: `${event.id}:${d.endpoint_id}`,
    })),
  );
  await recordMessageIds(
    db,
    toPublish.map((d) => d.id),
    messageIds,
  );
  return {
    matched: matched.length,
    created: toPublish.filter((d) => d.created).length,
    published: toPublish.length,
  };
}

/** Remembers which QStash message carries each delivery (the failure callback checks it). */
export async function recordMessageIds(db: Db, deliveryIds: string[], messageIds: string[]): Promise<void> {
  await db.execute(sql`
    UPDATE webhook_deliveries d SET message_id = m.message_id
      FROM unnest(${uuidArray(deliveryIds)}::uuid[], ${textArray(messageIds)}::text[])
           AS m(id, message_id)
     WHERE d.id = m.id`);
}
