/**
 * Durations as QStash accepts them in headers (`Upstash-Delay: 10s`, `Upstash-Timeout: 1m`)
 * and in a destination's `Retry-After` answer (`6m5s`). Go's time.ParseDuration units plus
 * `d`, which the publish docs list for Upstash-Delay.
 */
const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** Parses `10s`, `1h30m`, `500ms`; a bare number is taken as seconds. Returns undefined when invalid. */
export function parseDuration(value: string): number | undefined {
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  const part = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)/y;
  let total = 0;
  let index = 0;
  while (index < text.length) {
    part.lastIndex = index;
    const match = part.exec(text);
    if (!match) return undefined;
    total += Number(match[1]) * UNIT_MS[match[2]!]!;
    index = part.lastIndex;
  }
  return index === 0 ? undefined : total;
}

/**
 * Retry-After as the QStash retry docs define it: seconds, an RFC 1123 date, or a
 * duration such as `6m5s`. Returns the delay in ms from `now`, or undefined.
 */
export function parseRetryAfter(value: string, now: number): number | undefined {
  const text = value.trim();
  if (text === "") return undefined;
  const asDuration = parseDuration(text);
  if (asDuration !== undefined) return asDuration;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}
