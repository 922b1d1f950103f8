import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { queryRows } from "./rows.ts";

export interface DeliveryJobFailure {
  deliveryId: string;
  /** QStash's id of the job that ran out of retries. */
  messageId: string;
  /** The deliver route's last answer to QStash. */
  status: number | null;
  retried: number | null;
  dlqId: string | null;
}

/**
 * QStash gave up on a `webhook.deliver` job: the delivery is failed and a
 * `webhook.delivery_failed` alert raised, in one statement so neither exists
 * without the other. Only the job that currently carries the delivery can fail
 * it: a late callback from a job a redelivery has replaced changes nothing, and
 * so does a repeat of the callback (it finds the row failed already).
 */
export async function markDeliveryFailed(db: Db, f: DeliveryJobFailure): Promise<{ failed: boolean }> {
  const details = JSON.stringify({
    messageId: f.messageId,
    status: f.status,
    retried: f.retried,
    dlqId: f.dlqId,
  });
  const rows = await queryRows<{ id: string }>(
    db,
    sql`WITH failed AS (
          UPDATE webhook_deliveries
             SET status = 'failed', failed_at = now(), lease_until = NULL, next_attempt_at = NULL,
                 last_error = coalesce(last_error, 'retries exhausted')
           WHERE id = ${f.deliveryId} AND status = 'pending'
             AND (message_id IS NULL OR message_id = ${f.messageId})
          RETURNING id, endpoint_id, event_id, attempts, last_error
        )
        INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
        SELECT 'webhook.delivery_failed', event_id, 'webhook.deliver',
               'webhook delivery ' || id || ' to endpoint ' || endpoint_id || ' failed after '
                 || attempts || ' attempts: ' || last_error,
               ${details}::jsonb || jsonb_build_object('deliveryId', id, 'endpointId', endpoint_id)
          FROM failed
        RETURNING id`,
  );
  return { failed: rows.length > 0 };
}
