import { and, eq, getTableColumns, gte, sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookAttempts, webhookDeliveries, webhookEndpoints } from "../schema.ts";
import { laggingOf, type Lagging } from "./lag.ts";
import { queryRows } from "./rows.ts";
import { endpointView, type EndpointRow, type EndpointView } from "./schemas.ts";
import { endpointEtag } from "./update.ts";

const HEALTH_WINDOW_HOURS = 24;

export interface EndpointHealth {
  windowHours: number;
  /** Deliveries created in the window, by where they stand now. */
  deliveries: { total: number; delivered: number; failed: number; pending: number };
  /** POSTs made in the window, and how many got a 2xx. */
  attempts: { total: number; succeeded: number };
  /** succeeded / total attempts in the window (retries count): null when nothing was sent. */
  successRate: number | null;
  lastSuccessAt: Date | null;
  failingSince: Date | null;
  disabledReason: string | null;
  /**
   * Its open `webhook.endpoint_lagging` alert's figures: how many deliveries wait for
   * a first attempt and since when, as of the sweep that last looked. Null when it
   * keeps up.
   */
  lagging: Lagging | null;
}

export async function findEndpointRow(db: Db, id: string): Promise<EndpointRow> {
  const [row] = await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id));
  if (!row) throw new NotFoundError("webhook endpoint", id);
  return row;
}

/** An endpoint with its health over the last 24 hours, from the delivery and attempt logs. */
export async function getEndpoint(
  db: Db,
  id: string,
  now: Date = new Date(),
): Promise<{ endpoint: EndpointView; health: EndpointHealth; etag: string }> {
  // Its ETag read with it, so the ETag names the very values shown.
  const [row] = await db
    .select({ ...getTableColumns(webhookEndpoints), etag: endpointEtag })
    .from(webhookEndpoints)
    .where(eq(webhookEndpoints.id, id));
  if (!row) throw new NotFoundError("webhook endpoint", id);
  const since = new Date(now.getTime() - HEALTH_WINDOW_HOURS * 3_600_000);
  const count = (filter?: ReturnType<typeof sql>) =>
    filter ? sql<number>`count(*) FILTER (WHERE ${filter})::int` : sql<number>`count(*)::int`;
  // Both counts walk an index bounded by the window (deliveries by (endpoint,
  // created_at), attempts by attempted_at), not the endpoint's whole history.
  const [[deliveries], [attempts], [lag]] = await Promise.all([
    db
      .select({
        total: count(),
        delivered: count(sql`${webhookDeliveries.status} = 'delivered'`),
        failed: count(sql`${webhookDeliveries.status} = 'failed'`),
        pending: count(sql`${webhookDeliveries.status} = 'pending'`),
      })
      .from(webhookDeliveries)
      .where(and(eq(webhookDeliveries.endpointId, id), gte(webhookDeliveries.createdAt, since))),
    db
      .select({
        total: count(),
        succeeded: count(sql`${webhookAttempts.status} BETWEEN 200 AND 299`),
      })
      .from(webhookAttempts)
      .innerJoin(webhookDeliveries, eq(webhookDeliveries.id, webhookAttempts.deliveryId))
      .where(and(eq(webhookDeliveries.endpointId, id), gte(webhookAttempts.attemptedAt, since))),
    queryRows<{ lagging: Lagging | null }>(db, sql`SELECT ${laggingOf(sql`${id}::uuid`)} AS lagging`),
  ]);
  const d = deliveries ?? { total: 0, delivered: 0, failed: 0, pending: 0 };
  const a = attempts ?? { total: 0, succeeded: 0 };
  return {
    etag: row.etag,
    endpoint: endpointView(row, now),
    health: {
      windowHours: HEALTH_WINDOW_HOURS,
      deliveries: d,
      attempts: a,
      successRate: a.total === 0 ? null : Math.round((a.succeeded / a.total) * 10_000) / 10_000,
      lastSuccessAt: row.lastSuccessAt,
      failingSince: row.failingSince,
      disabledReason: row.disabledReason,
      lagging: lag?.lagging ?? null,
    },
  };
}
