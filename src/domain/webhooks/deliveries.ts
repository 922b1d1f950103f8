import { and, asc, desc, eq, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookAttempts, webhookDeliveries, type WebhookDeliveryStatus } from "../schema.ts";
import { findEndpointRow } from "./get.ts";
import { attemptInProgress, attemptsMade } from "./delivery-log.ts";
import { cursorAt, keysetPage, olderThan } from "./keyset.ts";
import { assertCursorOf, attemptView, deliveryView, listTag, type Cursor } from "./schemas.ts";

export interface ListDeliveriesOptions {
  status?: WebhookDeliveryStatus;
  limit: number;
  cursor?: Cursor;
}

/**
 * An endpoint's deliveries, newest first, a keyset page at a time (never OFFSET:
 * a page deep in a busy endpoint's history costs what the first one does, on the
 * (endpoint_id, created_at) index). Unknown endpoint: NotFoundError.
 */
export async function listDeliveries(db: Db, endpointId: string, options: ListDeliveriesOptions) {
  // The id as the row holds it: the path may write it in capitals, the cursor's tag not.
  const list = listTag("deliveries", endpointId.toLowerCase(), options.status);
  assertCursorOf(options.cursor, list);
  await findEndpointRow(db, endpointId);
  const t = webhookDeliveries;
  const where: SQL[] = [eq(t.endpointId, endpointId)];
  if (options.status) where.push(eq(t.status, options.status));
  if (options.cursor) where.push(olderThan(t.createdAt, t.id, options.cursor));
  const rows = await db
    .select({ row: t, at: cursorAt(t.createdAt) })
    .from(t)
    .where(and(...where))
    .orderBy(desc(t.createdAt), desc(t.id))
    .limit(options.limit + 1);
  const { items, nextCursor } = keysetPage(rows, options.limit, deliveryView, list);
  return { deliveries: items, nextCursor };
}

/** One delivery with the exact body that is signed and POSTed, and every attempt, oldest first. */
export async function getDelivery(db: Db, id: string) {
  const [found] = await db
    .select({ row: webhookDeliveries, attemptInProgress })
    .from(webhookDeliveries)
    .where(eq(webhookDeliveries.id, id));
  if (!found) throw new NotFoundError("webhook delivery", id);
  const { row } = found;
  const attempts = await db
    .select()
    .from(webhookAttempts)
    .where(eq(webhookAttempts.deliveryId, id))
    .orderBy(asc(webhookAttempts.id));
  return {
    delivery: {
      ...deliveryView(row),
      body: row.body,
      // The count, beside the log: an attempt whose Worker stopped is counted without a row.
      attemptsMade: attemptsMade(row.attempts, attempts.length),
      // The latest of them still waiting for the receiver's answer, so without its row yet.
      attemptInProgress: found.attemptInProgress,
      attempts: attempts.map(attemptView),
    },
  };
}
