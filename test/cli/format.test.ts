import { describe, expect, it } from "vitest";
import { formatDrain } from "../../src/cli/format.ts";

describe("relay drain's summary line", () => {
  const result = { claimed: 0, fanned: 0, failed: 0, poisoned: 0, jobs: 0, backedOffUntil: null };

  it("counts one pass as a pass, and more as passes", () => {
    // A drain that found nothing said "1 passes".
    expect(formatDrain({ ...result, passes: 1, stoppedBecause: "drained" })).toBe(
      "1 pass: fanned 0, failed 0, poisoned 0, jobs 0 (nothing left to claim)",
    );
    expect(formatDrain({ ...result, passes: 3, fanned: 450, jobs: 560, stoppedBecause: "budget" })).toBe(
      "3 passes: fanned 450, failed 0, poisoned 0, jobs 560 (time budget spent)",
    );
  });
});
