import { describe, expect, it } from "vitest";
import { stoppedText } from "../../src/worker/scheduled.ts";
import type { DrainResult } from "../../src/outbox/index.ts";

// The sweep's log line said "fanned 0 of 36 claimed … 0 failed, stopped: backoff"
// during a QStash outage: rows claimed and put back, and no reason anywhere in it
// (the outage walkthrough).
describe("the sweep's line, where its drain stopped", () => {
  const drain: DrainResult = {
    passes: 1,
    claimed: 36,
    fanned: 0,
    failed: 0,
    poisoned: 0,
    jobs: 0,
    stoppedBecause: "backoff",
    backedOffUntil: new Date("2026-12-07T11:37:16.526Z"),
  };

  it("names the failure that backed the relay off, and its rows put back", () => {
    expect(stoppedText({ ...drain, error: "PublishError: QStash 503: overloaded" })).toBe(
      "backoff until 2026-12-07T11:37:16.526Z: the pass failed, its rows put back: PublishError: QStash 503: overloaded",
    );
  });

  it("says when the relay was backed off already and no pass ran", () => {
    expect(stoppedText({ ...drain, passes: 1, claimed: 0 })).toBe(
      "backed off until 2026-12-07T11:37:16.526Z, no pass ran",
    );
  });

  it("keeps the other reasons as they were", () => {
    expect(stoppedText({ ...drain, stoppedBecause: "drained", backedOffUntil: null })).toBe("drained");
    expect(stoppedText({ ...drain, stoppedBecause: "budget", backedOffUntil: null })).toBe("budget");
  });
});
