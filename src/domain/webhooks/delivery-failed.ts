import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { isoTime, queryRows } from "./rows.ts";
import { alertEventIdOf } from "./send-test.ts";

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
 * The alert's words, from its count and details: one expression for a new alert and
 * for one that folds in more failures, so both read alike. It counts failures, not
 * deliveries: a delivery re-sent that fails again is counted again.
 */
function alertMessage(count: SQL, details: SQL): SQL {
  return sql`CASE WHEN ${count} = 1 THEN '1 delivery failure' ELSE ${count} || ' delivery failures' END
    || ' at webhook endpoint ' || (${details}->>'endpointId') || ' (' || (${details}->>'url') || ')'
    || CASE WHEN ${count} = 1 THEN ': delivery ' ELSE '; the latest: delivery ' END
    || (${details}->>'deliveryId') || ', after ' || (${details}->>'attempts')
    || CASE WHEN ${details}->>'attempts' = '1' THEN ' attempt: ' ELSE ' attempts: ' END
    || (${details}->>'lastError')
    -- What answers it, as the disabled alert says "Enable it, then recover": the alert
    -- walkthrough found this one naming no next step.
    || '. Once the endpoint answers, Recover on its page (webhooks recover) sends the failed ones again'`;
}

/**
 * QStash gave up on these `webhook.deliver` jobs: each delivery is failed, and
 * its endpoint's one open `webhook.delivery_failed` alert counts it (raised when
 * the endpoint had none), all in one statement, so no failure exists without an
 * alert that counts it. One alert per endpoint, not per delivery (ADR 0031): an
 * endpoint that is down fails every delivery it is sent, and one alert per
 * delivery buried everything else on the alerts page under thousands of the same.
 *
 * The open alert is updated where there is one, and only the first failure inserts:
 * an INSERT that ends in ON CONFLICT DO UPDATE takes an id from the sequence all the
 * same, and the alerts' ids jumped by a failure each (1, 62, 64 in a walkthrough). The
 * ON CONFLICT stays for the race, a failure of another connection raising it after
 * this statement's snapshot.
 *
 * Only the job that currently carries a delivery can fail it: a late callback
 * from a job a redelivery has replaced changes nothing, and so does a repeat of
 * a callback (it finds the row failed already). Answers the deliveries failed.
 * A batch is the cron sweep's dead letters: one round trip for all of them.
 */
export async function markDeliveriesFailed(
  db: Db,
  failures: readonly DeliveryJobFailure[],
): Promise<string[]> {
  if (failures.length === 0) return [];
  const input = JSON.stringify(
    failures.map((f) => ({
      delivery_id: f.deliveryId,
      message_id: f.messageId,
      status: f.status,
      retried: f.retried,
      dlq_id: f.dlqId,
    })),
  );
  // An open alert's details (`was`) with a batch's failures (`more`) folded in: the
  // count added up, the rest the latest failure's, the first failure's time kept. The
  // same SET for the update of an open alert and for the insert that met one.
  const fold = (was: SQL, more: SQL) => {
    const count = sql`((${was}->>'count')::int + (${more}->>'count')::int)`;
    return sql`message = ${alertMessage(count, more)},
               details = ${was} || (${more} - 'firstFailedAt') || jsonb_build_object('count', ${count})`;
  };
  const rows = await queryRows<{ id: string }>(
    db,
    sql`WITH input AS (
          SELECT * FROM jsonb_to_recordset(${input}::jsonb)
                   AS f(delivery_id uuid, message_id text, status int, retried int, dlq_id text)
        ),
        failed AS (
          UPDATE webhook_deliveries d
             SET status = 'failed', failed_at = now(), lease_until = NULL, next_attempt_at = NULL,
                 last_error = coalesce(d.last_error, 'retries exhausted')
            FROM input f, webhook_endpoints e
           WHERE d.id = f.delivery_id AND d.status = 'pending' AND e.id = d.endpoint_id
             AND (d.message_id IS NULL OR d.message_id = f.message_id)
          RETURNING d.id, d.endpoint_id, e.url, ${alertEventIdOf(sql.raw("d"))} AS event_id,
                    d.attempts, d.last_error,
                    f.message_id, f.status, f.retried, f.dlq_id
        ),
        latest AS (
          SELECT DISTINCT ON (endpoint_id) endpoint_id, event_id,
                 -- jobStatus: the deliver route's last answer to QStash (503 while it
                 -- retries), not the receiver's; what the receiver did is lastError.
                 jsonb_build_object('endpointId', endpoint_id, 'url', url,
                                    'count', count(*) OVER (PARTITION BY endpoint_id),
                                    'deliveryId', id, 'attempts', attempts, 'lastError', last_error,
                                    'messageId', message_id, 'jobStatus', status, 'retried', retried,
                                    'dlqId', dlq_id, 'firstFailedAt', ${isoTime(sql`now()`)},
                                    'lastFailedAt', ${isoTime(sql`now()`)}) AS details
            FROM failed ORDER BY endpoint_id, id
        ),
        folded AS (
          UPDATE outbox_alerts a
             SET event_id = l.event_id, ${fold(sql.raw("a.details"), sql.raw("l.details"))}
            FROM latest l
           WHERE a.kind = 'webhook.delivery_failed' AND a.resolved_at IS NULL
             AND a.details->>'endpointId' = l.endpoint_id::text
          RETURNING l.endpoint_id
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
          SELECT 'webhook.delivery_failed', event_id, 'webhook.deliver',
                 ${alertMessage(sql.raw("(details->>'count')::int"), sql.raw("details"))}, details
            FROM latest WHERE endpoint_id NOT IN (SELECT endpoint_id FROM folded)
          ON CONFLICT ((details->>'endpointId')) WHERE resolved_at IS NULL AND kind = 'webhook.delivery_failed'
          DO UPDATE SET event_id = EXCLUDED.event_id,
                        ${fold(sql.raw("outbox_alerts.details"), sql.raw("EXCLUDED.details"))}
          RETURNING 1
        )
        SELECT id FROM failed`,
  );
  return rows.map((r) => r.id);
}

/** markDeliveriesFailed for the one job a failure callback names. */
export async function markDeliveryFailed(db: Db, f: DeliveryJobFailure): Promise<{ failed: boolean }> {
  return { failed: (await markDeliveriesFailed(db, [f])).length > 0 };
}
