import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { queryRows } from "./rows.ts";

/** Minutes a delivery may wait for its first attempt before its endpoint counts as lagging. */
export const LAG_ALERT_AFTER_MINUTES = 15;

/**
 * The cron sweep's watch on endpoints that do not keep up. An endpoint that answers
 * slowly (each POST taking seconds, a few at a time by flow control) falls behind
 * what it is sent without failing anything: its deliveries wait in QStash, pending,
 * never attempted, and the backlog grows without any alert (a soak's 4-second
 * receiver fell behind by hundreds an hour). So an enabled endpoint whose oldest
 * delivery not yet attempted is older than `afterMinutes` has one open
 * `webhook.endpoint_lagging` alert, with how many wait and since when (brought up
 * to date by each sweep while it lags); once it has
 * caught up (or is disabled or deleted) the next sweep resolves it, as the relay's
 * own `relay.lagging` is. Deliveries being retried are not counted: a failing
 * endpoint has `webhook.delivery_failed` and auto-disable.
 *
 * One statement, so overlapping sweeps cannot raise two: the unique index on open
 * lagging alerts per endpoint (migration 0018) decides, ON CONFLICT updating the
 * open one. Answers the endpoints it raised a new alert for.
 */
export async function evaluateEndpointLag(
  db: Db,
  options: { now: Date; afterMinutes?: number },
): Promise<string[]> {
  const after = options.afterMinutes ?? LAG_ALERT_AFTER_MINUTES;
  const rows = await queryRows<{ id: string }>(
    db,
    sql`WITH waiting AS (
          SELECT e.id, e.url, w.oldest, w.n
            FROM webhook_endpoints e
            CROSS JOIN LATERAL (
              SELECT min(d.created_at) AS oldest, count(*)::int AS n FROM webhook_deliveries d
               WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.attempts = 0
            ) w
           WHERE e.enabled AND w.oldest < ${options.now}::timestamptz - make_interval(mins => ${after})
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, subscription, message, details)
          SELECT 'webhook.endpoint_lagging', 'webhook.deliver',
                 format('webhook endpoint %s is not keeping up: %s deliveries wait for their first attempt, the oldest since %s (over %s min)',
                        id, n, to_char(oldest AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'), ${after}::int),
                 jsonb_build_object('endpointId', id, 'url', url, 'waiting', n, 'oldestWaitingSince', oldest)
            FROM waiting
          ON CONFLICT ((details->>'endpointId')) WHERE resolved_at IS NULL AND kind = 'webhook.endpoint_lagging'
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING details->>'endpointId' AS id, xmax = 0 AS new
        ),
        cleared AS (
          UPDATE outbox_alerts a SET resolved_at = now()
           WHERE a.kind = 'webhook.endpoint_lagging' AND a.resolved_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM waiting w WHERE w.id::text = a.details->>'endpointId')
        )
        SELECT id FROM raised WHERE new`,
  );
  return rows.map((r) => r.id);
}
