/**
 * Every number that decides how hard the relay works and how it waits, in one
 * place: the SQL, the Worker and the CLI take their values from here, so a
 * change of policy is a change of this file alone.
 */

/** Waits of `base * 2^n` seconds after the n-th previous failure, capped. */
export interface ExponentialBackoff {
  baseSeconds: number;
  capSeconds: number;
}

export const RELAY_POLICY = {
  /** Rows claimed per pass; bounds the transaction, whatever the backlog. */
  batchSize: 200,
  /**
   * After a failed pass, how many rows the next pass (a `rows` pass) retries one
   * by one. Each is
   * its own publish request, and a Worker invocation may make few subrequests.
   */
  rowsPassSize: 25,
  /** One publish request may take this long before the pass gives up on it. */
  publishTimeoutMs: 15_000,
  /** A whole pass; far inside QStash's 10-minute deduplication window (see RelayOptions). */
  passTimeoutMs: 60_000,
  /** QStash's message size limit; a larger job fails its own row, not the batch. */
  maxJobBytes: 1_000_000,
  /**
   * What a job body adds around its event (`{"subscription":<name>,"event":`, then
   * `,"coalesced":[]}`): recordEvent refuses an event whose jobs could not fit.
   */
  jobEnvelopeBytes: 1_000,
  /** The relay as a whole after a failed pass (an outage): 2 s, doubling, capped at a minute. */
  passBackoff: { baseSeconds: 2, capSeconds: 60 } satisfies ExponentialBackoff,
  /** One row after an error of its own: the same curve, counted by the row's attempts. */
  rowRetry: { baseSeconds: 2, capSeconds: 60 } satisfies ExponentialBackoff,
  /** After this many failures of its own, a row is set aside for an operator. */
  poisonAfter: 5,
} as const;

/**
 * The backoff as a SQL expression, so it is computed where the counter lives
 * (concurrent failures each double the delay once, with no read-modify-write).
 * `previousFailures` is a SQL expression for the count before this failure.
 */
export function backoffSecondsSql(previousFailures: string, backoff: ExponentialBackoff): string {
  return `least(${backoff.capSeconds}, ${backoff.baseSeconds} * 2 ^ (${previousFailures}))`;
}
