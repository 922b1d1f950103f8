import { describe, expect, it } from "vitest";
import { LOCKOUT_POLICY, lockedUntil } from "../../src/worker/dashboard/lockout.ts";

const T0 = Date.parse("2026-12-03T08:00:00Z");
const at = (minutes: number) => new Date(T0 + minutes * 60_000);

describe("lockedUntil", () => {
  it("locks for 10 minutes from the fifth failure within 10 minutes", () => {
    const failures = [0, 1, 2, 3, 4].map(at);
    expect(LOCKOUT_POLICY).toEqual({ maxFailures: 5, windowMs: 600_000, lockMs: 600_000 });
    expect(lockedUntil(failures.slice(0, 4), at(4))).toBeNull();
    expect(lockedUntil(failures, at(4))).toEqual(at(14));
    expect(lockedUntil(failures, at(13.9))).toEqual(at(14));
    expect(lockedUntil(failures, at(14))).toBeNull();
  });

  it("does not lock five failures spread over more than the window", () => {
    expect(lockedUntil([0, 3, 6, 9, 10.5].map(at), at(10.5))).toBeNull();
    // …but the next failure within the window of the second does.
    expect(lockedUntil([0, 3, 6, 9, 10.5, 12].map(at), at(12))).toEqual(at(22));
  });
});
