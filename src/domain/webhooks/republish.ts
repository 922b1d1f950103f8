import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import type { DeliverQueue } from "./deliver-queue.ts";
import { recordMessageIds } from "./fanout.ts";
import { queryRows, textArray } from "./rows.ts";

/** A delivery an operator put back to pending, with what it was before, to restore if publishing fails. */
export interface Resend {
  id: string;
  event_id: string;
  endpoint_id: string;
  before: {
    status: string;
    delivered_at: string | null;
    failed_at: string | null;
    last_error: string | null;
    message_id: string | null;
    next_attempt_at: string | null;
    requested_at: string | null;
    lease_until: string | null;
  };
}

/**
 * A Resend's `before`, read from a `webhook_deliveries` row locked for the reset:
 * every column the reset changes. The job's id and its next attempt were left out,
 * so a failed redeliver of a pending delivery "changed nothing" yet left it with no
 * job of its own: every old job of it could POST again, and the sweep published
 * another as if its publish had been lost (11 attempts on an 8-attempt schedule,
 * the outage walkthrough).
 */
export const RESEND_BEFORE = sql`jsonb_build_object(
  'status', status, 'delivered_at', delivered_at, 'failed_at', failed_at, 'last_error', last_error,
  'message_id', message_id, 'next_attempt_at', next_attempt_at, 'requested_at', requested_at,
  'lease_until', lease_until) AS before`;

/**
 * Publishes fresh deliver jobs for deliveries already committed as pending.
 * After the commit, never inside the transaction: QStash may deliver the job
 * at once, and a job that read the row before the commit would find it still
 * delivered or failed, acknowledge, and send nothing. If publishing fails, the
 * rows get back what they were (`undo`) and the caller's request fails, so the
 * operator asks again. Each job gets a new deduplication id (the fan-out's plus
 * a random suffix) or QStash would drop it as the original; the `webhook-id` a
 * receiver sees stays the event id.
 */
export async function republish(db: Db, queue: DeliverQueue, rows: Resend[]): Promise<void> {
  if (rows.length === 0) return;
  let messageIds: string[];
  try {
    messageIds = await enqueueAgain(queue, rows, "resend");
  } catch (error) {
    await undo(db, rows);
    throw error;
  }
  await recordMessageIds(
    db,
    rows.map((r) => r.id),
    messageIds,
  );
  await resolveAnsweredFailures(db, [...new Set(rows.map((r) => r.endpoint_id))]);
}

/**
 * A redeliver or recover is the operator's answer to a delivery's failure (as a
 * requeue is to a poisoned event's): once the new jobs are in QStash, each
 * endpoint's open `webhook.delivery_failed` alert is resolved if no delivery it
 * counts is still failed, i.e. none of the endpoint's deliveries that failed since
 * the alert was raised. Re-sending one of many failures leaves the alert open for
 * the rest; if a resend fails again, it raises or joins an open alert of its own.
 *
 * The alerts are locked first and the failures read in a statement after: a
 * failure that folds into an alert while this runs either finishes first (and is
 * seen, so the alert stays open) or waits and, finding the alert resolved, raises
 * a new one. A single statement would read the failures from before its wait.
 */
async function resolveAnsweredFailures(db: Db, endpointIds: string[]): Promise<void> {
  await db.transaction(async (tx) => {
    const open = await queryRows<{ id: string }>(
      tx,
      sql`SELECT id FROM outbox_alerts
           WHERE kind = 'webhook.delivery_failed' AND resolved_at IS NULL
             AND details->>'endpointId' = ANY(${textArray(endpointIds)}::text[])
           ORDER BY id FOR UPDATE`,
    );
    if (open.length === 0) return;
    await tx.execute(sql`
      UPDATE outbox_alerts a SET resolved_at = now(),
             message = a.message || '; resolved: every delivery it counted was sent again',
             details = coalesce(a.details, '{}'::jsonb) || '{"resolvedBy": "resend"}'::jsonb
       WHERE a.id = ANY(${textArray(open.map((o) => o.id))}::bigint[]) AND a.resolved_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                          WHERE d.status = 'failed' AND d.failed_at >= coalesce((a.details->>'firstFailedAt')::timestamptz, a.created_at)
                            AND d.endpoint_id = (a.details->>'endpointId')::uuid)`);
  });
}

/**
 * Deliver jobs for deliveries that had one before (or should have): each gets the
 * fan-out's deduplication id plus `<tag>-<random>`, or QStash would drop it as a
 * duplicate of the original. Answers the message ids, in order.
 */
export function enqueueAgain(
  queue: DeliverQueue,
  rows: Pick<Resend, "id" | "event_id" | "endpoint_id">[],
  tag: "resend" | "sweep",
): Promise<string[]> {
  return queue.enqueue(
    rows.map((r) => ({
      deliveryId: r.id,
      endpointId: r.endpoint_id,
      deduplicationId: `${r.event_id}:${r.endpoint_id}:${tag}-${crypto.randomUUID()}`,
    })),
  );
}

/** Only rows still pending without a job: one that a job has touched since is left alone. */
async function undo(db: Db, rows: Resend[]): Promise<void> {
  await db.execute(sql`
    UPDATE webhook_deliveries d
       SET status = b.status, delivered_at = b.delivered_at, failed_at = b.failed_at, last_error = b.last_error,
           message_id = b.message_id, next_attempt_at = b.next_attempt_at, requested_at = b.requested_at,
           lease_until = b.lease_until
      FROM jsonb_to_recordset(${JSON.stringify(rows.map((r) => ({ id: r.id, ...r.before })))}::jsonb)
           AS b(id uuid, status text, delivered_at timestamptz, failed_at timestamptz, last_error text,
                message_id text, next_attempt_at timestamptz, requested_at timestamptz, lease_until timestamptz)
     WHERE d.id = b.id AND d.status = 'pending' AND d.message_id IS NULL`);
}
