import { sql } from "drizzle-orm";
import { matchesGlob, type Fanout } from "../../outbox/index.ts";
import { jobsWaitingFor, jobsWaitingText, readWaitLists, type JobsWaiting } from "../subscription-backlog.ts";
import { WEBHOOK_FANOUT } from "../subscriptions.ts";
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
  const matched = await matchingEndpoints(db, event);
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

/**
 * The enabled endpoints an event of `type` in `scope` goes to, with when each was
 * created (an event's page tells "no endpoint takes it" from "its fan-out job has not
 * run yet" by those that existed when it was fanned out).
 */
export async function matchingEndpoints(
  db: Db,
  event: { scope: string | null; type: string },
): Promise<{ id: string; createdAt: Date }[]> {
  const endpoints = await queryRows<{ id: string; types: string[]; created_at: Date | string }>(
    db,
    sql`SELECT id, types, created_at FROM webhook_endpoints
         WHERE enabled AND scope IS NOT DISTINCT FROM ${event.scope}`,
  );
  // The same glob semantics as subscriptions, so `note.*` means one thing everywhere.
  return endpoints
    .filter((e) => e.types.some((glob) => matchesGlob(glob, event.type)))
    .map((e) => ({ id: e.id, createdAt: new Date(e.created_at) }));
}

/**
 * Why an event shows no webhook delivery, in words, or undefined when it has some or
 * nothing is owed: its `webhook.fanout` job (a subscription of every event) makes
 * them when QStash runs it, and a backlog of those jobs held behind their flow-control
 * limit delayed a walkthrough's webhooks by minutes while every view read healthy and
 * the event's page said only "no deliveries". Counts the endpoints that take the event
 * now and already existed when it was fanned out.
 */
async function noDeliveriesReason(
  db: Db,
  event: {
    scope: string | null;
    type: string;
    fannedOutAt: Date | null;
    fanout: Fanout | null;
  },
  deliveries: number,
  jobsWaiting: readonly JobsWaiting[],
  time?: (d: Date) => string,
): Promise<string | undefined> {
  if (deliveries > 0 || event.fannedOutAt === null) return undefined;
  const job = event.fanout?.[WEBHOOK_FANOUT];
  if (!job) return undefined;
  const fannedAt = event.fannedOutAt.getTime();
  const waiting = (await matchingEndpoints(db, event)).filter(
    (e) => e.createdAt.getTime() <= fannedAt,
  ).length;
  if (waiting === 0) return "none: no enabled endpoint of its scope takes its type";
  const message = "messageId" in job ? job.messageId : undefined;
  // The sweep's last reading of the fan-out jobs' wait list says whether a backlog is why.
  const held = jobsWaiting.find((w) => w.subscription === WEBHOOK_FANOUT);
  const backlog = held
    ? jobsWaitingText(held, time)
    : "a backlog of fan-out jobs waits behind their flow-control limit, or its attempts fail";
  return (
    `none yet: ${waiting} enabled endpoint${waiting === 1 ? "" : "s"} of its scope take${waiting === 1 ? "s" : ""} its type, ` +
    `and its ${WEBHOOK_FANOUT} job${message ? ` (${message})` : ""} has not made the deliveries: ` +
    `QStash still holds it (${backlog})`
  );
}

/**
 * What an event's views (its dashboard page, `events show`, GET /admin/events/:id)
 * say of the work it is still owed: each of its jobs that may still wait in QStash,
 * as the sweep last read the wait lists, and why it has no webhook delivery. `ran`
 * is what the view already read of the event: its job failures and its deliveries.
 */
export async function eventWaitingNotes(
  db: Db,
  event: Parameters<typeof noDeliveriesReason>[1] & { fannedOutAt: Date | null },
  ran: { jobFailures: readonly { subscription: string }[]; webhookDeliveries: number },
  time?: (d: Date) => string,
): Promise<{ jobsWaiting: JobsWaiting[]; webhooksNote: string | null }> {
  const jobsWaiting = jobsWaitingFor(event, await readWaitLists(db), ran);
  const webhooksNote = await noDeliveriesReason(db, event, ran.webhookDeliveries, jobsWaiting, time);
  return { jobsWaiting, webhooksNote: webhooksNote ?? null };
}

/** Remembers which QStash message carries each delivery (the failure callback checks it). */
export async function recordMessageIds(db: Db, deliveryIds: string[], messageIds: string[]): Promise<void> {
  await db.execute(sql`
    UPDATE webhook_deliveries d SET message_id = m.message_id
      FROM unnest(${uuidArray(deliveryIds)}::uuid[], ${textArray(messageIds)}::text[])
           AS m(id, message_id)
     WHERE d.id = m.id`);
}
