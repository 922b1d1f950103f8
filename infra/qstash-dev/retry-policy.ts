import { parseRetryAfter } from "./duration.ts";

/** Each delay is capped at one day (QStash retry docs). */
export const MAX_RETRY_DELAY_MS = 86_400_000;

/**
 * QStash's documented backoff: `delay = min(86400, e ** (2.5 * n))` seconds, where
 * n = how many times the request has been retried. We take n as the Upstash-Retried
 * value of the attempt being scheduled, so the first retry waits e^2.5 ≈ 12 s, which
 * matches the docs' table (n=1 → 12s, n=2 → 2m28s). Which n QStash plugs in is not
 * spelled out beyond that table, so this reading is ours.
 */
export function backoffMs(nextRetried: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, Math.exp(2.5 * nextRetried) * 1000);
}

/** The response headers the retry docs say QStash honours instead of its backoff. */
const RETRY_AFTER_HEADERS = [
  "retry-after",
  "x-ratelimit-reset",
  "x-ratelimit-reset-requests",
  "x-ratelimit-reset-tokens",
];

/**
 * The delay a destination asked for, if any. Per the docs a value beyond the one
 * day maximum is ignored and the backoff applies instead.
 */
export function requestedRetryDelayMs(headers: Record<string, string[]>, now: number): number | undefined {
  const lower = new Map(Object.entries(headers).map(([name, values]) => [name.toLowerCase(), values]));
  for (const name of RETRY_AFTER_HEADERS) {
    const value = lower.get(name)?.[0];
    if (value === undefined) continue;
    const delay = parseRetryAfter(value, now);
    if (delay !== undefined && delay <= MAX_RETRY_DELAY_MS) return delay;
  }
  return undefined;
}

/** 489 plus `Upstash-NonRetryable-Error: true` means "do not retry, go to the DLQ". */
export function isNonRetryable(status: number | undefined, headers: Record<string, string[]>): boolean {
  if (status !== 489) return false;
  return Object.entries(headers).some(
    ([name, values]) =>
      name.toLowerCase() === "upstash-nonretryable-error" && values[0]?.trim().toLowerCase() === "true",
  );
}
