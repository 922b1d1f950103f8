import { parseRetryAfter } from "./duration.ts";
import { parseRetryDelayExpression } from "./retry-delay-expression.ts";
import type { Attempt, MessageRecord } from "./types.ts";

/** Each delay is capped at one day (QStash retry docs). */
export const MAX_RETRY_DELAY_MS = 86_400_000;

/**
 * QStash's documented backoff: `delay = min(86400, e ** (2.5 * n))` seconds, where
 * "n = how many times this request has been retried". `retried` is the Upstash-Retried
 * value of the attempt that just failed, i.e. retries so far, so the first retry waits
 * e^0 = 1 s, then 12 s, 2m28s, ... The current docs' table starts at n=1 (12 s) and does
 * not settle the first delay; an earlier revision listed n=0 → 1s, and the Upstash-Retry-Delay
 * docs count `retried` from 0 the same way (`pow(2, retried) * 1000` → 1s, 2s, 4s). That
 * reading is ours.
 */
export function backoffMs(retried: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, Math.exp(2.5 * retried) * 1000);
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

/**
 * The unscaled delay before the next attempt. A destination's Retry-After wins over
 * everything (the docs present it as "instead of" the backoff; that it also beats an
 * Upstash-Retry-Delay expression is our reading), then the expression, then the
 * default backoff. Expression results are clamped to [0, 1 day] (our guess; the docs
 * state the cap only for the default backoff).
 */
export function nextRetryDelay(
  message: Pick<MessageRecord, "retried" | "retryDelayExpression">,
  responseHeaders: Record<string, string[]>,
  now: number,
): { delayMs: number; source: NonNullable<Attempt["nextRetryDelaySource"]> } {
  const requested = requestedRetryDelayMs(responseHeaders, now);
  if (requested !== undefined) return { delayMs: requested, source: "retry-after" };
  if (message.retryDelayExpression !== undefined) {
    const value = parseRetryDelayExpression(message.retryDelayExpression)(message.retried);
    const delayMs = Number.isFinite(value)
      ? Math.min(MAX_RETRY_DELAY_MS, Math.max(0, value))
      : MAX_RETRY_DELAY_MS;
    return { delayMs, source: "retry-delay" };
  }
  return { delayMs: backoffMs(message.retried), source: "backoff" };
}
