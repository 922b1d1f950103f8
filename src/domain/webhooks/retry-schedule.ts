/**
 * When a failed webhook delivery is tried again, as data (Svix's schedule): the
 * n-th retry waits `seconds[n - 1]` after the previous attempt, and once the list
 * is spent QStash gives up and the failure callback marks the delivery failed.
 * QStash carries the schedule out: the deliver job answers a failure with this
 * delay in `Retry-After`, so no handler ever waits or loops.
 */
export const WEBHOOK_RETRY_SCHEDULE_SECONDS: readonly number[] = [
  5,
  5 * 60,
  30 * 60,
  2 * 60 * 60,
  5 * 60 * 60,
  10 * 60 * 60,
  10 * 60 * 60,
];

/** QStash honours at most a day in `Retry-After`. */
export const MAX_RETRY_DELAY_SECONDS = 24 * 60 * 60;

/**
 * Parses the `WEBHOOK_RETRY_SCHEDULE` binding: comma-separated whole seconds,
 * e.g. "1,1,1" (tests, dev). Answers an error message instead of throwing, for
 * the config schema to report.
 */
export function parseRetrySchedule(
  text: string,
): { ok: true; seconds: number[] } | { ok: false; message: string } {
  const parts = text.split(",").map((p) => p.trim());
  if (parts.length > 20) return { ok: false, message: "must list at most 20 delays" };
  const seconds: number[] = [];
  for (const part of parts) {
    if (!/^\d+$/.test(part))
      return { ok: false, message: "must be comma-separated whole seconds, e.g. 5,300,1800" };
    const n = Number(part);
    if (n < 1 || n > MAX_RETRY_DELAY_SECONDS)
      return { ok: false, message: "each delay must be 1 to 86400 seconds" };
    seconds.push(n);
  }
  return { ok: true, seconds };
}

/**
 * The delay before the next attempt after an attempt that failed, where
 * `retried` is how many times QStash had already retried this job (its
 * `Upstash-Retried` header). A receiver that asked for longer (`Retry-After`)
 * gets longer; nobody gets more than a day. Null once the schedule is spent:
 * QStash will not come back, whatever the answer says.
 */
export function nextRetryDelaySeconds(
  schedule: readonly number[],
  retried: number,
  receiverRetryAfter: number | null,
): number | null {
  const planned = schedule[retried];
  if (planned === undefined) return null;
  return Math.min(MAX_RETRY_DELAY_SECONDS, Math.max(planned, receiverRetryAfter ?? 0));
}

/**
 * A receiver's `Retry-After`, in whole seconds from `now`: delay-seconds or an
 * HTTP date (RFC 9110). Null when absent or unreadable (then the schedule rules).
 */
export function parseRetryAfter(value: string | null, now: Date): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return null;
  return Math.max(0, Math.ceil((at - now.getTime()) / 1000));
}
