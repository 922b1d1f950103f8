import { describe, expect, it } from "vitest";
import {
  explainedByRoundTrips,
  farOverNear,
  placementOrder,
  placementRtts,
} from "../../bench/support/placement.ts";
import { summarize } from "../../bench/support/stats.ts";

// The README quotes these figures; each is per repetition, so a ratio never pairs
// one repetition's far edge with another's near-database figure.
describe("bench placement comparison", () => {
  const rtts = { farEdge: 80, nearDatabase: 5 };

  it("explains a difference of exactly round trips × the RTT difference as 1", () => {
    // 7 round trips: 7 × 75 ms = 525 ms apart in the first repetition; 10 % more in the second.
    const far = summarize([625, 677.5]);
    const near = summarize([100, 100]);
    const explained = explainedByRoundTrips(far, near, summarize([7, 7]), rtts);
    expect(explained.runs[0]).toBeCloseTo(1);
    expect(explained.runs[1]).toBeCloseTo(1.1);
  });

  it("pairs far and near by repetition, not by rank", () => {
    const ratio = farOverNear(summarize([600, 300]), summarize([100, 150]));
    expect(ratio.runs).toEqual([6, 2]);
    expect(ratio.median).toBe(4);
  });

  it("alternates which placement a repetition measures first", () => {
    expect(placementOrder(1)).toEqual(["farEdge", "nearDatabase"]);
    expect(placementOrder(2)).toEqual(["nearDatabase", "farEdge"]);
    expect(placementOrder(3)).toEqual(["farEdge", "nearDatabase"]);
  });

  it("takes the RTTs from the command line and refuses a comparison that cannot be read", () => {
    expect(placementRtts({ "far-edge-rtt": "120", "near-db-rtt": "2" })).toEqual({
      farEdge: 120,
      nearDatabase: 2,
    });
    expect(() => placementRtts({ "far-edge-rtt": "5", "near-db-rtt": "5" })).toThrow(/larger/);
    expect(() => placementRtts({ "far-edge-rtt": "eighty", "near-db-rtt": "5" })).toThrow(/far-edge-rtt/);
    expect(() => placementRtts({ "far-edge-rtt": "80", "near-db-rtt": "-1" })).toThrow(/near-db-rtt/);
  });
});
