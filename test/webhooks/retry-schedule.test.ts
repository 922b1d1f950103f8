import { describe, expect, it } from "vitest";
import {
  nextRetryDelaySeconds,
  parseRetryAfter,
  parseRetrySchedule,
  WEBHOOK_RETRY_SCHEDULE_SECONDS,
} from "../../src/domain/webhooks/retry-schedule.ts";
import { parseConfig } from "../../src/worker/env.ts";
import { bindings } from "../support/worker.ts";

describe("the webhook retry schedule", () => {
  it("is Svix's: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h", () => {
    expect(WEBHOOK_RETRY_SCHEDULE_SECONDS).toEqual([5, 300, 1800, 7200, 18000, 36000, 36000]);
  });

  it("picks the delay by QStash's retry count, lets a longer Retry-After win, and ends when spent", () => {
    const schedule = [5, 300];
    expect(nextRetryDelaySeconds(schedule, 0, null)).toBe(5);
    expect(nextRetryDelaySeconds(schedule, 1, null)).toBe(300);
    expect(nextRetryDelaySeconds(schedule, 0, 60)).toBe(60);
    expect(nextRetryDelaySeconds(schedule, 1, 60)).toBe(300);
    expect(nextRetryDelaySeconds(schedule, 0, 10 * 86_400)).toBe(86_400);
    expect(nextRetryDelaySeconds(schedule, 2, 60)).toBeNull();
  });

  it("reads Retry-After as seconds or an HTTP date, and ignores what it cannot read", () => {
    const now = new Date("2026-12-03T08:00:00Z");
    expect(parseRetryAfter("120", now)).toBe(120);
    expect(parseRetryAfter("Thu, 03 Dec 2026 08:02:00 GMT", now)).toBe(120);
    expect(parseRetryAfter("Thu, 03 Dec 2026 07:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("soon", now)).toBeNull();
    expect(parseRetryAfter(null, now)).toBeNull();
  });

  it("the WEBHOOK_RETRY_SCHEDULE binding overrides it, validated with the other bindings", () => {
    expect(parseRetrySchedule("1, 2,3")).toEqual({ ok: true, seconds: [1, 2, 3] });
    const ok = parseConfig(bindings({ WEBHOOK_RETRY_SCHEDULE: "1,1" }));
    expect(ok.ok && ok.config.WEBHOOK_RETRY_SCHEDULE).toEqual([1, 1]);
    const unset = parseConfig(bindings());
    expect(unset.ok && unset.config.WEBHOOK_RETRY_SCHEDULE).toEqual(WEBHOOK_RETRY_SCHEDULE_SECONDS);
    expect(unset.ok && unset.config.WEBHOOK_DISABLE_AFTER_DAYS).toBe(5);
    for (const bad of ["", "1,,2", "5s", "0", "100000", "-1"]) {
      const parsed = parseRetrySchedule(bad);
      expect({ bad, ok: parsed.ok }).toEqual({ bad, ok: false });
    }
    const wrong = parseConfig(
      bindings({ WEBHOOK_RETRY_SCHEDULE: "5s,1", WEBHOOK_DISABLE_AFTER_DAYS: "0.5" }),
    );
    expect(wrong.ok).toBe(false);
    expect(!wrong.ok && wrong.message).toContain(
      "binding WEBHOOK_RETRY_SCHEDULE must be comma-separated whole seconds",
    );
    expect(!wrong.ok && wrong.message).toContain(
      "binding WEBHOOK_DISABLE_AFTER_DAYS must be a whole number of days",
    );
  });
});
