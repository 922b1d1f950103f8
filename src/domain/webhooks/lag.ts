import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { isoTime, queryRows, utcText } from "./rows.ts";

/** Minutes a delivery may wait for its first attempt before its endpoint counts as lagging. */
export const LAG_ALERT_AFTER_MINUTES = 15;

/** Minutes an enabled endpoint must keep failing every attempt before the sweep raises `webhook.endpoint_failing`. */
export const FAILING_ALERT_AFTER_MINUTES = 15;

/** What one sweep's check of an endpoint condition found. */
export interface EndpointCheck {
  /** Endpoints in that condition now, each with its one open alert. */
  count: number;
  /** Those whose alert this check raised. */
  raised: string[];
  /** Those whose alert this check resolved: the condition is over (or they are disabled or gone). */
  cleared: string[];
}

/**
 * The endpoint conditions the sweep keeps one open alert for, each with its unique
 * index, as SQL literals: the conflict clause names the index by its predicate, which
 * a parameter could not be proved to imply.
 */
const LAGGING = sql.raw("'webhook.endpoint_lagging'");
const FAILING = sql.raw("'webhook.endpoint_failing'");

/**
 * Keeps one open `kind` alert per endpoint that `current` selects (its rows: `id`,
 * `message`, `details` naming `endpointId`), brought up to date by each sweep, and
 * resolves the others. One statement. The open alert is updated where there is one
 * and inserted only where there is none (an insert ending in its conflict clause
 * would take an id each sweep); overlapping sweeps meet at the kind's unique index
 * on open alerts per endpoint (migrations 0018, 0030), ON CONFLICT updating the one
 * that won.
 */
async function keepEndpointAlerts(db: Db, k: SQL, current: SQL, over: SQL): Promise<EndpointCheck> {
  const [row] = await queryRows<{ count: number; raised: string[]; cleared: string[] }>(
    db,
    sql`WITH current AS (${current}),
        updated AS (
          UPDATE outbox_alerts a SET message = c.message, details = c.details
            FROM current c
           WHERE a.kind = ${k} AND a.resolved_at IS NULL
             AND a.details->>'endpointId' = c.id::text
          RETURNING c.id
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, subscription, message, details)
          SELECT ${k}, 'webhook.deliver', message, details
            FROM current WHERE id NOT IN (SELECT id FROM updated)
          ON CONFLICT ((details->>'endpointId')) WHERE resolved_at IS NULL AND kind = ${k}
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING details->>'endpointId' AS id, xmax = 0 AS new
        ),
        cleared AS (
          -- Resolved saying why, as the relay's and the subscriptions' alerts are: one
          -- that kept "fell behind" after it caught up read as still open (the alert
          -- walkthrough).
          UPDATE outbox_alerts a SET resolved_at = now(),
                 message = a.message || '; resolved at ' || ${utcText(sql`now()`)} || ': '
                   || CASE WHEN e.id IS NULL THEN 'the endpoint was deleted'
                           WHEN NOT e.enabled THEN 'the endpoint was disabled'
                           ELSE ${over} END
            FROM outbox_alerts s LEFT JOIN webhook_endpoints e ON e.id::text = s.details->>'endpointId'
           WHERE s.id = a.id AND a.kind = ${k} AND a.resolved_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM current c WHERE c.id::text = a.details->>'endpointId')
          RETURNING a.details->>'endpointId' AS id
        )
        SELECT (SELECT count(*)::int FROM current) AS count,
               ARRAY(SELECT id FROM raised WHERE new ORDER BY id) AS raised,
               ARRAY(SELECT id FROM cleared ORDER BY id) AS cleared`,
  );
  return { count: row?.count ?? 0, raised: row?.raised ?? [], cleared: row?.cleared ?? [] };
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
 * relay's own `relay.lagging` is. Deliveries being retried are not counted (a
 * failing endpoint has `webhook.endpoint_failing`), nor is one in flight (it has its
 * first attempt), so `waiting` is a little under the endpoint's `pending`.
 */
export async function evaluateEndpointLag(
  db: Db,
  options: { now: Date; afterMinutes?: number },
): Promise<EndpointCheck> {
  const after = options.afterMinutes ?? LAG_ALERT_AFTER_MINUTES;
  return keepEndpointAlerts(
    db,
    LAGGING,
    sql`SELECT e.id,
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
         WHERE e.enabled AND w.oldest < ${options.now}::timestamptz - make_interval(mins => ${after})`,
    sql`format('it caught up: no delivery has waited over %s min for its first attempt', ${after}::int)`,
  );
}

/**
 * The cron sweep's watch on endpoints that keep failing. A delivery is retried on
 * its schedule for about a day before it gives up and raises
 * `webhook.delivery_failed`, so a receiver that went down answered 5xx to every
 * attempt for a day with no alert at all while its deliveries piled up in retries
 * (an operator walkthrough's `stats` said all clear throughout). So an enabled
 * endpoint that has failed every attempt since `failing_since` for over
 * `afterMinutes` has one open `webhook.endpoint_failing` alert, with how many of its
 * deliveries wait for a retry and its latest error, brought up to date by each
 * sweep; its first successful attempt (or its disabling or deletion) resolves it at
 * the next sweep.
 */
export async function evaluateFailingEndpoints(
  db: Db,
  options: { now: Date; afterMinutes?: number },
): Promise<EndpointCheck> {
  const after = options.afterMinutes ?? FAILING_ALERT_AFTER_MINUTES;
  return keepEndpointAlerts(
    db,
    FAILING,
    sql`SELECT e.id,
               -- Ends with what sends the retries now, hours apart by then, once the receiver is fixed.
               format('webhook endpoint %s (%s) has failed every attempt since %s (over %s min): at %s, %s %s for a retry; the latest: %s. '
                      'Once it answers, Recover on its page (webhooks recover) sends now its deliveries waiting for a retry, hours apart by then',
                      e.id, e.url, ${utcText(sql`e.failing_since`)}, ${after}::int, ${utcText(sql`now()`)}, w.n,
                      CASE WHEN w.n = 1 THEN 'delivery waited' ELSE 'deliveries waited' END,
                      coalesce(w.last_error, 'no error recorded')) AS message,
               jsonb_build_object('endpointId', e.id, 'url', e.url, 'retrying', w.n,
                                  'failingSince', ${isoTime(sql`e.failing_since`)},
                                  'lastError', w.last_error,
                                  'checkedAt', ${isoTime(sql`now()`)}) AS details
          FROM webhook_endpoints e
          CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE d.status = 'pending' AND d.attempts > 0)::int AS n,
                   (array_agg(d.last_error ORDER BY d.last_attempt_at DESC)
                      FILTER (WHERE d.last_attempt_at IS NOT NULL AND d.last_error IS NOT NULL))[1] AS last_error
              FROM webhook_deliveries d
             -- A delivery still pending was made within its retry schedule (about a day): the
             -- bound keeps the read to the endpoint's recent rows (its created_at index).
             WHERE d.endpoint_id = e.id AND d.created_at > now() - interval '3 days'
          ) w
         WHERE e.enabled AND e.failing_since < ${options.now}::timestamptz - make_interval(mins => ${after})`,
    // A success clears failing_since; a failure after it starts it again, later.
    sql`CASE WHEN e.last_success_at IS NOT NULL AND (e.failing_since IS NULL OR e.failing_since > e.last_success_at)
             THEN 'an attempt succeeded at ' || ${utcText(sql`e.last_success_at`)}
             ELSE 'it no longer fails every attempt' END`,
  );
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

/** Webhook deliveries not attempted yet, across every endpoint (`stats`, `GET /admin/stats`). */
export interface DeliveriesWaiting {
  deliveries: number;
  endpoints: number;
  /** When the oldest of them was created; null when there are none. */
  oldestSince: string | null;
}

/**
 * The deliveries still waiting for their first attempt, on the index the lag check
 * reads: most are queued in QStash behind their endpoint's 10 in flight (ADR 0028),
 * which the subscriptions' wait lists do not cover, so `stats` said "waiting in
 * QStash: none" beside 420 deliveries queued for one slow receiver.
 */
export async function deliveriesWaiting(db: Db): Promise<DeliveriesWaiting> {
  const [row] = await queryRows<DeliveriesWaiting>(
    db,
    sql`SELECT count(*)::int AS deliveries, count(DISTINCT endpoint_id)::int AS endpoints,
               ${isoTime(sql`min(created_at)`)} AS "oldestSince"
          FROM webhook_deliveries WHERE status = 'pending' AND attempts = 0`,
  );
  return row ?? { deliveries: 0, endpoints: 0, oldestSince: null };
}
