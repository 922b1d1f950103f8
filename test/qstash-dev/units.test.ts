import { describe, expect, it } from "vitest";
import { parseDuration, parseRetryAfter } from "../../infra/qstash-dev/duration.ts";
import { parseRetryDelayExpression } from "../../infra/qstash-dev/retry-delay-expression.ts";
import { backoffMs, isNonRetryable, nextRetryDelay } from "../../infra/qstash-dev/retry-policy.ts";

// Pure helpers, checked directly because the end-to-end tests only see a few of their inputs.

describe("durations and Retry-After", () => {
  it.each([
    ["10s", 10_000],
    ["3m", 180_000],
    ["1h30m", 5_400_000],
    ["1d", 86_400_000],
    ["500ms", 500],
    ["7", 7_000],
    ["1.5s", 1_500],
  ])("parseDuration(%s) = %d ms", (text, ms) => expect(parseDuration(text)).toBe(ms));

  it.each(["", "soon", "10x", "s10", "-5s"])("parseDuration(%j) is invalid", (text) =>
    expect(parseDuration(text)).toBeUndefined(),
  );

  it("Retry-After takes seconds, durations and RFC 1123 dates (retry docs)", () => {
    const now = Date.parse("2024-06-27T12:16:00Z");
    expect(parseRetryAfter("0", now)).toBe(0);
    expect(parseRetryAfter("10", now)).toBe(10_000);
    expect(parseRetryAfter("6m5s", now)).toBe(365_000);
    expect(parseRetryAfter("Thu, 27 Jun 2024 12:16:24 GMT", now)).toBe(24_000);
    expect(parseRetryAfter("whenever", now)).toBeUndefined();
  });
});

describe("retry policy", () => {
  it("backs off min(86400, e^(2.5 n)) seconds", () => {
    expect(backoffMs(0)).toBe(1000);
    expect(Math.round(backoffMs(1) / 1000)).toBe(12);
    expect(Math.round(backoffMs(2) / 1000)).toBe(148); // 2m28s
    expect(Math.round(backoffMs(3) / 1000)).toBe(1808); // 30m8s
    expect(backoffMs(5)).toBe(86_400_000);
  });

  it("honours X-RateLimit-Reset like Retry-After, and prefers it over an expression", () => {
    const message = { retried: 0, retryDelayExpression: "5000" };
    expect(nextRetryDelay(message, { "X-RateLimit-Reset": ["3"] }, 0)).toEqual({
      delayMs: 3000,
      source: "retry-after",
    });
    expect(nextRetryDelay(message, {}, 0)).toEqual({ delayMs: 5000, source: "retry-delay" });
    expect(nextRetryDelay({ retried: 1 }, {}, 0).source).toBe("backoff");
  });

  it("only 489 with Upstash-NonRetryable-Error: true is non-retryable", () => {
    expect(isNonRetryable(489, { "Upstash-NonRetryable-Error": ["true"] })).toBe(true);
    expect(isNonRetryable(489, { "upstash-nonretryable-error": ["TRUE"] })).toBe(true);
    expect(isNonRetryable(489, {})).toBe(false);
    expect(isNonRetryable(500, { "Upstash-NonRetryable-Error": ["true"] })).toBe(false);
  });
});

describe("Upstash-Retry-Delay expressions", () => {
  it.each([
    ["1000", 3, 1000],
    ["1000 * (1 + retried)", 2, 3000],
    ["pow(2, retried) * 1000", 3, 8000],
    ["max(1000, pow(2, retried) * 100)", 2, 1000],
    ["min(5000, 100 + 2 * 3 - 6 / 2)", 0, 103],
    ["-retried + 10", 4, 6],
    ["floor(sqrt(10)) + ceil(0.2) + round(1.5) + abs(-1) + exp(0)", 0, 8],
  ])("%s with retried=%d is %d", (expression, retried, expected) => {
    expect(parseRetryDelayExpression(expression)(retried)).toBe(expected);
  });

  it.each(["", "pow(2)", "retried +", "foo(1)", "1000 ms", "(1", "process.exit(1)"])(
    "%j is refused",
    (bad) => {
      expect(() => parseRetryDelayExpression(bad)).toThrow(/invalid upstash-retry-delay/);
    },
  );
});
