import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { queryRows } from "./rows.ts";

/**
 * A `webhook.endpoint_disabled` alert's message, from the disabled row's `id` and
 * `url` and the reason: which endpoint, and what the operator does about it. It said
 * only "webhook endpoint <id> disabled: every delivery failed for 5 days", unlike the
 * other webhook alerts, and nothing said that the events meanwhile are skipped (the
 * outage walkthrough). Both places that disable an endpoint write it.
 */
export function disabledAlertMessage(id: SQL, url: SQL, reason: string): SQL {
  return sql`'webhook endpoint ' || ${id} || ' (' || ${url} || ') disabled: ' || ${reason}::text ||
             '; events recorded while it is disabled make no delivery for it. Enable it, then recover its failed deliveries'`;
}

/** `WEBHOOK_DISABLE_AFTER_DAYS` when the binding is unset. */
export const DEFAULT_DISABLE_AFTER_DAYS = 5;

/**
 * The cron sweep's share of webhooks: an endpoint whose deliveries have all
 * failed for `afterDays` (failing since before then, no success since) is
 * disabled with the reason, and an alert raised per endpoint, in one statement.
 * `now` is the caller's clock, so a test can move it instead of waiting days.
 * The deliver handler keeps `failing_since` and `last_success_at` as it goes, so
 * this reads endpoints only, never the attempt log.
 */
export async function disableFailingEndpoints(
  db: Db,
  options: { afterDays: number; now: Date },
): Promise<string[]> {
  const reason = `every delivery failed for ${options.afterDays} days`;
  const rows = await queryRows<{ id: string }>(
    db,
    sql`WITH disabled AS (
          UPDATE webhook_endpoints
             SET enabled = false, disabled_reason = ${reason}, disabled_at = ${options.now}, updated_at = ${options.now}
           WHERE enabled
             AND failing_since <= ${options.now}::timestamptz - make_interval(days => ${options.afterDays})
             AND (last_success_at IS NULL OR last_success_at < failing_since)
          RETURNING id, url, failing_since
        )
        INSERT INTO outbox_alerts (kind, subscription, message, details)
        SELECT 'webhook.endpoint_disabled', 'webhook.deliver',
               ${disabledAlertMessage(sql.raw("id"), sql.raw("url"), reason)},
               jsonb_build_object('endpointId', id, 'url', url, 'reason', ${reason}::text, 'failingSince', failing_since)
          FROM disabled
        RETURNING details->>'endpointId' AS id`,
  );
  return rows.map((r) => r.id);
}
