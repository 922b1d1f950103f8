import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { isoTime, queryRows, utcText } from "./rows.ts";

/** Minutes a delivery may wait for its first attempt before its endpoint counts as lagging. */
export const LAG_ALERT_AFTER_MINUTES = 15;

/** What one sweep's lag check found. */
export interface LagCheck {
  /** Endpoints behind now, each with its one open alert. */
  behind: number;
  /** Those whose alert this check raised. */
  raised: string[];
  /** Those whose alert this check resolved: they have caught up (or are disabled or gone). */
  caughtUp: string[];
}

/**
 * The cron sweep's watch on endpoints that do not keep up. An endpoint that answers
 * slowly (each POST taking seconds, a few at a time by flow control) falls behind
 * what it is sent without failing anything: its deliveries wait in QStash, pending,
 * never attempted, and the backlog grows without any alert (a soak's 4-second
 * receiver fell behind by hundreds an hour). So an enabled endpoint whose oldest
 * delivery not yet attempted is older than `afterMinutes` has one open
 * `webhook.endpoint_lagging` alert, with how many wait and since when, as of the
 * sweep that last looked (each sweep brings it up to date while it lags); once it
 * has caught up (or is disabled or deleted) the next sweep resolves it, as the
 * relay's own `relay.lagging` is. Deliveries being retried are not counted: a
 * failing endpoint has `webhook.delivery_failed` and auto-disable; nor is one in
 * flight (it has its first attempt), so `waiting` is a little under the
 * endpoint's `pending`.
 *
 * One statement. The open alert is updated where there is one and inserted only
 * where there is none (an insert ending in its conflict clause would take an id
 * each sweep); overlapping sweeps meet at the unique index on open lagging alerts
 * per endpoint (migration 0018), ON CONFLICT updating the one that won.
 */
export async function evaluateEndpointLag(
  db: Db,
  options: { now: Date; afterMinutes?: number },
): Promise<LagCheck> {
  const after = options.afterMinutes ?? LAG_ALERT_AFTER_MINUTES;
  const [row] = await queryRows<{ behind: number; raised: string[]; caught_up: string[] }>(
    db,
    sql`WITH waiting AS (
          SELECT e.id, e.url, w.oldest, w.n,
                 format('webhook endpoint %s (%s) fell behind: at %s, %s deliveries waited for their first attempt, the oldest since %s (over %s min)',
                        e.id, e.url, ${utcText(sql`now()`)}, w.n, ${utcText(sql`w.oldest`)}, ${after}::int) AS message,
                 jsonb_build_object('endpointId', e.id, 'url', e.url, 'waiting', w.n,
                                    'oldestWaitingSince', ${isoTime(sql`w.oldest`)},
                                    'checkedAt', ${isoTime(sql`now()`)}) AS details
            FROM webhook_endpoints e
            CROSS JOIN LATERAL (
              SELECT min(d.created_at) AS oldest, count(*)::int AS n FROM webhook_deliveries d
               WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.attempts = 0
            ) w
           WHERE e.enabled AND w.oldest < ${options.now}::timestamptz - make_interval(mins => ${after})
        ),
        updated AS (
          UPDATE outbox_alerts a SET message = w.message, details = w.details
            FROM waiting w
           WHERE a.kind = 'webhook.endpoint_lagging' AND a.resolved_at IS NULL
             AND a.details->>'endpointId' = w.id::text
          RETURNING w.id
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, subscription, message, details)
          SELECT 'webhook.endpoint_lagging', 'webhook.deliver', message, details
            FROM waiting WHERE id NOT IN (SELECT id FROM updated)
          ON CONFLICT ((details->>'endpointId')) WHERE resolved_at IS NULL AND kind = 'webhook.endpoint_lagging'
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING details->>'endpointId' AS id, xmax = 0 AS new
        ),
        cleared AS (
          UPDATE outbox_alerts a SET resolved_at = now()
           WHERE a.kind = 'webhook.endpoint_lagging' AND a.resolved_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM waiting w WHERE w.id::text = a.details->>'endpointId')
          RETURNING a.details->>'endpointId' AS id
        )
        SELECT (SELECT count(*)::int FROM waiting) AS behind,
               ARRAY(SELECT id FROM raised WHERE new ORDER BY id) AS raised,
               ARRAY(SELECT id FROM cleared ORDER BY id) AS caught_up`,
  );
  return { behind: row?.behind ?? 0, raised: row?.raised ?? [], caughtUp: row?.caught_up ?? [] };
}

/** An open lagging alert's figures, as the endpoint's health shows them. */
export interface Lagging {
  waiting: number;
  oldestWaitingSince: string;
  checkedAt: string;
}

/**
 * The figures of an endpoint's open lagging alert, as a correlated subquery on
 * `endpoint` (an SQL expression of its id): null when it is not behind.
 */
export function laggingOf(endpoint: SQL): SQL<Lagging | null> {
  return sql<Lagging | null>`(SELECT jsonb_build_object('waiting', (a.details->>'waiting')::int,
            'oldestWaitingSince', a.details->>'oldestWaitingSince', 'checkedAt', a.details->>'checkedAt')
       FROM outbox_alerts a
      WHERE a.kind = 'webhook.endpoint_lagging' AND a.resolved_at IS NULL
        AND a.details->>'endpointId' = (${endpoint})::text)`;
}
