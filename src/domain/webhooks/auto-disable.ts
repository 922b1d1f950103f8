import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { queryRows } from "./rows.ts";

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
               'webhook endpoint ' || id || ' disabled: ' || ${reason},
               jsonb_build_object('endpointId', id, 'url', url, 'reason', ${reason}::text, 'failingSince', failing_since)
          FROM disabled
        RETURNING details->>'endpointId' AS id`,
  );
  return rows.map((r) => r.id);
}
