import { literal, nowSql, positiveInt } from "../sql.ts";
import { RELAY_POLICY, backoffSecondsSql, type ExponentialBackoff } from "./policy.ts";

/** What `recordFailureSql` returns: the relay's new backoff. */
export interface DbBackoff {
  failures: number;
  backoff_until: Date;
}

/**
 * Records a failed pass. Computed where the row lives, so concurrent passes that
 * fail together double the delay once each rather than racing a read-modify-write.
 */
export function recordFailureSql(
  error: string,
  now: Date | undefined,
  backoff: ExponentialBackoff = RELAY_POLICY.passBackoff,
): string {
  const NOW = nowSql(now);
  return `UPDATE outbox_relay_state
     SET failures = failures + 1,
         backoff_until = ${NOW} + make_interval(secs => ${backoffSecondsSql("failures", checkedBackoff(backoff))}),
         last_error = ${literal(error)},
         last_failure_at = ${NOW}
   WHERE id = 1
  RETURNING failures, backoff_until`;
}

/**
 * Clears the backoff after a pass that succeeded. The WHERE keeps the common case
 * (nothing to clear) from locking the singleton row, which would serialise every
 * concurrent pass's commit behind it.
 */
export function clearFailuresSql(now: Date | undefined): string {
  return `UPDATE outbox_relay_state
     SET failures = 0, backoff_until = NULL, last_success_at = ${nowSql(now)}
   WHERE id = 1 AND failures > 0`;
}

/** The numbers go into SQL text: anything but positive whole seconds is a caller's bug. */
function checkedBackoff(backoff: ExponentialBackoff): ExponentialBackoff {
  positiveInt(backoff.baseSeconds, "passBackoff.baseSeconds");
  positiveInt(backoff.capSeconds, "passBackoff.capSeconds");
  return backoff;
}
