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

/**
 * Ends the relay's backoff now, for an operator who has fixed the outage that caused
 * it: the next pass runs at once rather than at `backoff_until`, which may be an hour
 * away (RELAY_BACKOFF_CAP_SECONDS) while every sweep stops on it too (the outage
 * walkthrough). The failure count stays: a pass that fails again backs off as long
 * as the last one did; one that succeeds clears it. Answers when the backoff would
 * have ended, or null when the relay was not backed off.
 */
export function endBackoffSql(): string {
  // `was` is the row as the statement found it: RETURNING sees the value it replaced.
  return `UPDATE outbox_relay_state s SET backoff_until = NULL
      FROM outbox_relay_state was
     WHERE s.id = 1 AND was.id = 1 AND was.backoff_until > now()
  RETURNING was.backoff_until AS was_until`;
}
