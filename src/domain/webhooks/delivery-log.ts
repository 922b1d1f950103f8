import { asc, desc, eq, gte, inArray, sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { webhookAttempts, webhookDeliveries, webhookEndpoints } from "../schema.ts";
import { laggingOf, type Lagging } from "./lag.ts";
import { queryRows } from "./rows.ts";
import { editVersion } from "./update.ts";

/**
 * Read-only views of the webhook tables for operators: what an event caused, what
 * failed, and how attempts went over time. The delivery code (other modules)
 * writes these tables; nothing here changes them.
 */

export type AttemptRow = typeof webhookAttempts.$inferSelect;

export interface EventDelivery {
  id: string;
  endpointId: string;
  endpointUrl: string;
  status: string;
  attempts: number;
  lastError: string | null;
  nextAttemptAt: Date | null;
  deliveredAt: Date | null;
  failedAt: Date | null;
  messageId: string | null;
  createdAt: Date;
  /** An attempt holds the lease now: counted, its row not written yet (attemptInProgress). */
  attemptInProgress: boolean;
  attemptLog: AttemptRow[];
}

/**
 * Whether a delivery's latest counted attempt is still going: it is pending and an
 * attempt holds its lease (taken before the POST, given back or recorded after the
 * answer). Such an attempt has no row yet, and "left no record: the Worker stopped"
 * said of a slow receiver's attempt was wrong while the POST was still waiting. A
 * Worker killed mid-attempt leaves the lease until it runs out (LEASE_SECONDS).
 */
export const attemptInProgress = sql<boolean>`(${webhookDeliveries.status} = 'pending' AND ${webhookDeliveries.leaseUntil} IS NOT NULL AND ${webhookDeliveries.leaseUntil} > now())`;

/**
 * Every delivery one event caused, oldest first, without their attempts (each is
 * its delivery's to show): `events show` and `GET /admin/events/:id`.
 */
export function eventDeliveries(db: Db, eventId: string): Promise<Omit<EventDelivery, "attemptLog">[]> {
  return db
    .select({
      id: webhookDeliveries.id,
      endpointId: webhookDeliveries.endpointId,
      endpointUrl: webhookEndpoints.url,
      status: webhookDeliveries.status,
      attempts: webhookDeliveries.attempts,
      lastError: webhookDeliveries.lastError,
      nextAttemptAt: webhookDeliveries.nextAttemptAt,
      deliveredAt: webhookDeliveries.deliveredAt,
      failedAt: webhookDeliveries.failedAt,
      messageId: webhookDeliveries.messageId,
      createdAt: webhookDeliveries.createdAt,
      attemptInProgress,
    })
    .from(webhookDeliveries)
    .innerJoin(webhookEndpoints, eq(webhookEndpoints.id, webhookDeliveries.endpointId))
    .where(eq(webhookDeliveries.eventId, eventId))
    .orderBy(asc(webhookDeliveries.createdAt));
}

/** Every delivery one event caused, each with every attempt, oldest first (the dashboard's event page). */
export async function deliveriesForEvent(db: Db, eventId: string): Promise<EventDelivery[]> {
  const deliveries = await eventDeliveries(db, eventId);
  if (deliveries.length === 0) return [];
  const attempts = await db
    .select()
    .from(webhookAttempts)
    .where(
      inArray(
        webhookAttempts.deliveryId,
        deliveries.map((d) => d.id),
      ),
    )
    .orderBy(asc(webhookAttempts.id));
  return deliveries.map((d) => ({ ...d, attemptLog: attempts.filter((a) => a.deliveryId === d.id) }));
}

export interface FailedDelivery {
  id: string;
  endpointId: string;
  eventId: string;
  eventType: string;
  endpointUrl: string;
  attempts: number;
  lastError: string | null;
  failedAt: Date | null;
}

/** Deliveries that gave up, newest first. */
export async function failedDeliveries(db: Db, limit = 20): Promise<FailedDelivery[]> {
  return db
    .select({
      id: webhookDeliveries.id,
      endpointId: webhookDeliveries.endpointId,
      eventId: webhookDeliveries.eventId,
      eventType: webhookDeliveries.eventType,
      endpointUrl: webhookEndpoints.url,
      attempts: webhookDeliveries.attempts,
      lastError: webhookDeliveries.lastError,
      failedAt: webhookDeliveries.failedAt,
    })
    .from(webhookDeliveries)
    .innerJoin(webhookEndpoints, eq(webhookEndpoints.id, webhookDeliveries.endpointId))
    .where(eq(webhookDeliveries.status, "failed"))
    .orderBy(desc(webhookDeliveries.failedAt))
    .limit(limit);
}

export interface AttemptMinute {
  minute: Date;
  succeeded: number;
  failed: number;
}

/** Attempts per minute since `since` (2xx succeeded, anything else failed); only minutes that had any. */
export async function attemptsPerMinute(db: Db, since: Date): Promise<AttemptMinute[]> {
  const minute = sql<Date>`date_trunc('minute', ${webhookAttempts.attemptedAt})`;
  const found = await db
    .select({
      minute,
      succeeded: sql<number>`count(*) FILTER (WHERE ${webhookAttempts.status} BETWEEN 200 AND 299)::int`,
      failed: sql<number>`count(*) FILTER (WHERE ${webhookAttempts.status} IS NULL OR ${webhookAttempts.status} NOT BETWEEN 200 AND 299)::int`,
    })
    .from(webhookAttempts)
    .where(gte(webhookAttempts.attemptedAt, since))
    .groupBy(minute);
  return found.map((r) => ({
    minute: new Date(r.minute),
    succeeded: Number(r.succeeded),
    failed: Number(r.failed),
  }));
}

export interface EndpointHealth {
  id: string;
  url: string;
  scope: string | null;
  description: string;
  types: string[];
  /** editVersion (update.ts): what an edit form carries back. */
  version: string;
  enabled: boolean;
  disabledReason: string | null;
  disabledAt: Date | null;
  lastSuccessAt: Date | null;
  failingSince: Date | null;
  /** Attempts in the last 24 hours, and how many of them got a 2xx. */
  attempts24h: number;
  succeeded24h: number;
  pending: number;
  failed: number;
  /** Its open lagging alert's figures (lag.ts): it does not keep up. Null when it does. */
  lagging: Lagging | null;
}

/**
 * Every endpoint with its health: the columns the deliverer keeps, and the last day's
 * attempts. Newest first, as `GET /admin/webhooks/endpoints` pages them, so the
 * dashboard, `webhooks list` and the API list endpoints in one order.
 */
export async function endpointHealth(db: Db, endpointId?: string): Promise<EndpointHealth[]> {
  const found = await endpointHealthQuery(db, endpointId);
  return found.map((e) => ({
    ...e,
    attempts24h: Number(e.attempts24h),
    succeeded24h: Number(e.succeeded24h),
    pending: Number(e.pending),
    failed: Number(e.failed),
  }));
}

/** endpointHealth's statement, unrun: a test reads its plan's cost against history. */
export function endpointHealthQuery(db: Db, endpointId?: string) {
  // The last day's attempts of every endpoint in one pass: found by their own time
  // index, each joined to its delivery by primary key. As a subquery per endpoint
  // the planner hash-joined them against a scan of the endpoint's every delivery,
  // so a month of 530k deliveries made the Webhooks page take 3–10 s, more with
  // each endpoint (the month walkthrough).
  const lastDay = db
    .select({
      endpointId: sql<string>`d.endpoint_id`.as("endpoint_id"),
      attempts: sql<number>`count(*)::int`.as("attempts"),
      succeeded: sql<number>`(count(*) FILTER (WHERE a.status BETWEEN 200 AND 299))::int`.as("succeeded"),
    })
    .from(sql`${webhookAttempts} a JOIN ${webhookDeliveries} d ON d.id = a.delivery_id`)
    .where(
      sql`a.attempted_at >= now() - interval '24 hours'${endpointId ? sql` AND d.endpoint_id = ${endpointId}` : sql``}`,
    )
    .groupBy(sql`d.endpoint_id`)
    .as("last_day");
  // The outer table is named in full: inside sql``, Drizzle renders a column
  // unqualified, which a correlated subquery would read as its own table's "id".
  return db
    .select({
      id: webhookEndpoints.id,
      url: webhookEndpoints.url,
      scope: webhookEndpoints.scope,
      description: webhookEndpoints.description,
      types: webhookEndpoints.types,
      version: editVersion,
      enabled: webhookEndpoints.enabled,
      disabledReason: webhookEndpoints.disabledReason,
      disabledAt: webhookEndpoints.disabledAt,
      lastSuccessAt: webhookEndpoints.lastSuccessAt,
      failingSince: webhookEndpoints.failingSince,
      attempts24h: sql<number>`coalesce(${lastDay.attempts}, 0)`,
      succeeded24h: sql<number>`coalesce(${lastDay.succeeded}, 0)`,
      // Both found in an index by endpoint: pending ones in their own
      // (webhook_deliveries_endpoint_pending_idx), failed ones among the few failed.
      pending: sql<number>`(SELECT count(*)::int FROM ${webhookDeliveries} d
        WHERE d.endpoint_id = "webhook_endpoints"."id" AND d.status = 'pending')`,
      failed: sql<number>`(SELECT count(*)::int FROM ${webhookDeliveries} d
        WHERE d.endpoint_id = "webhook_endpoints"."id" AND d.status = 'failed')`,
      lagging: laggingOf(sql`"webhook_endpoints"."id"`),
    })
    .from(webhookEndpoints)
    .leftJoin(lastDay, eq(lastDay.endpointId, webhookEndpoints.id))
    .where(endpointId ? eq(webhookEndpoints.id, endpointId) : undefined)
    .orderBy(desc(webhookEndpoints.createdAt), desc(webhookEndpoints.id));
}

/** Where an endpoint stands, as the dashboard's badge and the CLI say it. */
export type EndpointHealthLabel = "disabled" | "failing" | "lagging" | "healthy";

/**
 * Disabled, failing (its deliveries fail), lagging (they succeed, but it does not keep
 * up: an open lagging alert; it said "healthy" while hundreds waited), or healthy.
 */
export function healthLabel(e: {
  enabled: boolean;
  failingSince: Date | null;
  lagging: Lagging | null;
}): EndpointHealthLabel {
  if (!e.enabled) return "disabled";
  if (e.failingSince) return "failing";
  return e.lagging ? "lagging" : "healthy";
}

/** An open lagging alert's figures in a phrase: "40 deliveries wait for their first attempt, the oldest since …". */
export function laggingText(l: Lagging): string {
  return `${l.waiting} deliver${l.waiting === 1 ? "y waits" : "ies wait"} for a first attempt, the oldest since ${l.oldestWaitingSince} (as of ${l.checkedAt})`;
}

/** The last day's attempts that got a 2xx, e.g. "27.3 % of 11", or "no attempts". */
export function successRateText(e: { attempts24h: number; succeeded24h: number }): string {
  if (e.attempts24h === 0) return "no attempts";
  // "of 2095" read as deliveries beside "pending 318" (the dashboard walkthrough): it counts attempts.
  const of = `${e.attempts24h} attempt${e.attempts24h === 1 ? "" : "s"}`;
  return `${((100 * e.succeeded24h) / e.attempts24h).toFixed(1)} % of ${of}`;
}

export interface EndpointDelivery {
  id: string;
  eventId: string;
  eventType: string;
  status: string;
  attempts: number;
  lastError: string | null;
  lastAttemptAt: Date | null;
  nextAttemptAt: Date | null;
  createdAt: Date;
  /**
   * When a pending delivery, with no attempt under way, was due (its retry, or its
   * job's first attempt) if that is more than OVERDUE_SHOWN_AFTER_MINUTES ago: late
   * behind flow control, or a job QStash lost (the sweep republishes those after
   * OVERDUE_AFTER_MINUTES), or retries spent with QStash's verdict not yet in.
   */
  overdueSince: Date | null;
}

/** Minutes past due after which the dashboard shows a pending delivery as overdue. */
export const OVERDUE_SHOWN_AFTER_MINUTES = 5;

/**
 * Where a page of an endpoint's deliveries ends: the last row's `created_at`
 * as Postgres's text, to the microsecond (a JS Date keeps only milliseconds
 * and would skip or repeat rows created in the same millisecond), and its id,
 * which breaks ties.
 */
export interface DeliveryCursor {
  createdAt: string;
  id: string;
}

export interface DeliveryPage {
  deliveries: EndpointDelivery[];
  /** The cursor of the next (older) page, or null when this is the last. */
  next: DeliveryCursor | null;
}

/**
 * One page of an endpoint's deliveries, newest first, by keyset on
 * (created_at, id): never OFFSET, so a page costs the same however deep it is,
 * and deliveries created meanwhile do not shift the next page. The row
 * comparison runs on webhook_deliveries_endpoint_created_idx (endpoint_id,
 * created_at), the id only settling ties within one microsecond.
 */
export async function endpointDeliveries(
  db: Db,
  endpointId: string,
  options: { before?: DeliveryCursor; limit?: number } = {},
): Promise<DeliveryPage> {
  const limit = options.limit ?? 50;
  const before = options.before
    ? sql`AND (created_at, id) < (${options.before.createdAt}::timestamptz, ${options.before.id}::uuid)`
    : sql``;
  const rows = await queryRows<{
    id: string;
    event_id: string;
    event_type: string;
    status: string;
    attempts: number;
    last_error: string | null;
    last_attempt_at: Date | null;
    next_attempt_at: Date | null;
    created_at: Date;
    overdue_since: Date | null;
    cursor: string;
  }>(
    db,
    sql`SELECT id, event_id, event_type, status, attempts, last_error, last_attempt_at,
               next_attempt_at, created_at,
               CASE WHEN status = 'pending' AND (lease_until IS NULL OR lease_until < now())
                         AND coalesce(next_attempt_at, requested_at)
                             < now() - make_interval(mins => ${OVERDUE_SHOWN_AFTER_MINUTES})
                    THEN coalesce(next_attempt_at, requested_at) END AS overdue_since,
               to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS cursor
          FROM webhook_deliveries
         WHERE endpoint_id = ${endpointId} ${before}
         ORDER BY created_at DESC, id DESC
         LIMIT ${limit + 1}`,
  );
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return {
    deliveries: page.map((r) => ({
      id: r.id,
      eventId: r.event_id,
      eventType: r.event_type,
      status: r.status,
      attempts: r.attempts,
      lastError: r.last_error,
      lastAttemptAt: date(r.last_attempt_at),
      nextAttemptAt: date(r.next_attempt_at),
      createdAt: date(r.created_at)!,
      overdueSince: date(r.overdue_since),
    })),
    next: rows.length > limit && last ? { createdAt: last.cursor, id: last.id } : null,
  };
}

/** The Neon Pool and node-postgres both parse timestamptz, but raw rows are typed loosely: one place to be sure. */
function date(v: Date | string | null): Date | null {
  return v === null ? null : new Date(v);
}

export interface DeliveryDetail extends EventDelivery {
  eventId: string;
  eventType: string;
  scope: string | null;
  lastAttemptAt: Date | null;
}

/**
 * The attempts a delivery made: its count, or its rows where a fixture or an older
 * row counted fewer. What every view of one delivery says it made.
 */
export function attemptsMade(counted: number, recorded: number): number {
  return Math.max(counted, recorded);
}

/**
 * What a delivery's attempt log lacks: `made` attempts counted (a lease taken counts
 * one, before its POST), `recorded` rows. A Worker stopped mid-attempt leaves the count
 * without the row, and its POST may have reached the receiver; every view of a
 * delivery says so rather than show one count here and another there (a walkthrough
 * saw "after 0 attempts" in one and "after 1 attempt" in the other). `inProgress`
 * (attemptInProgress): the latest is still waiting for its answer, not lost.
 * Undefined when every attempt has its row.
 */
export function unrecordedAttempts(made: number, recorded: number, inProgress = false): string | undefined {
  const missing = made - recorded;
  if (missing <= 0) return undefined;
  const going = inProgress ? "1 attempt in progress: the receiver has not answered yet" : undefined;
  const lost = missing - (inProgress ? 1 : 0);
  const stopped =
    lost === 0
      ? undefined
      : `${lost} ${inProgress ? "earlier " : ""}attempt${lost === 1 ? "" : "s"} left no record: the Worker stopped during ${
          lost === 1 ? "it" : "them"
        }, and the receiver may have got the POST`;
  return [going, stopped].filter((part) => part !== undefined).join("; ");
}

/** The kept response headers that explain an attempt's outcome or name it in the receiver's logs. */
const TOLD_HEADERS = ["retry-after", "location", "x-request-id"] as const;

/**
 * What the receiver's headers said, on one line (`retry-after: 600, location: …`),
 * or undefined: every view of an attempt shows it beside the status, since a 503's
 * Retry-After or a 302's Location is why the next attempt came when (or failed as)
 * it did. The JSON has them all; the text showed none.
 */
export function toldHeaders(headers: unknown): string | undefined {
  if (headers === null || typeof headers !== "object") return undefined;
  const kept = headers as Record<string, unknown>;
  const told = TOLD_HEADERS.filter((name) => typeof kept[name] === "string" && kept[name] !== "").map(
    (name) => `${name}: ${String(kept[name])}`,
  );
  return told.length === 0 ? undefined : told.join(", ");
}

/** One delivery with its endpoint's URL and every attempt, oldest first; undefined when there is none. */
export async function deliveryWithAttempts(db: Db, deliveryId: string): Promise<DeliveryDetail | undefined> {
  const [delivery] = await db
    .select({
      id: webhookDeliveries.id,
      endpointId: webhookDeliveries.endpointId,
      endpointUrl: webhookEndpoints.url,
      eventId: webhookDeliveries.eventId,
      eventType: webhookDeliveries.eventType,
      scope: webhookDeliveries.scope,
      status: webhookDeliveries.status,
      attempts: webhookDeliveries.attempts,
      lastError: webhookDeliveries.lastError,
      lastAttemptAt: webhookDeliveries.lastAttemptAt,
      nextAttemptAt: webhookDeliveries.nextAttemptAt,
      deliveredAt: webhookDeliveries.deliveredAt,
      failedAt: webhookDeliveries.failedAt,
      messageId: webhookDeliveries.messageId,
      createdAt: webhookDeliveries.createdAt,
      attemptInProgress,
    })
    .from(webhookDeliveries)
    .innerJoin(webhookEndpoints, eq(webhookEndpoints.id, webhookDeliveries.endpointId))
    .where(eq(webhookDeliveries.id, deliveryId));
  if (!delivery) return undefined;
  const attemptLog = await db
    .select()
    .from(webhookAttempts)
    .where(eq(webhookAttempts.deliveryId, deliveryId))
    .orderBy(asc(webhookAttempts.id));
  return { ...delivery, attemptLog };
}
