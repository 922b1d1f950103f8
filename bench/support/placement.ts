/**
 * Issue 11 item 8: what running the Worker next to its database buys. Both
 * benchmarks (the relay's `placement` phase and `npm run bench:write`) measure the
 * same production-shaped path twice: with the Worker far from its Neon region, as
 * at an edge location beside a distant caller (`farEdge`), and next to it, where
 * Smart Placement moves it (`nearDatabase`). Only the database round-trip time
 * changes between the two; the QStash request delay stays fixed, so the
 * difference is the database distance alone. There is no target: the comparison
 * is the report (ADR 0017).
 */
import { BenchUsageError, msOption } from "./args.ts";
import { summarize, type Summary } from "./stats.ts";

export const PLACEMENTS = ["farEdge", "nearDatabase"] as const;
export type Placement = (typeof PLACEMENTS)[number];

/** Milliseconds added to every database round trip at each placement. */
export type PlacementRtts = Record<Placement, number>;

/** The `parseArgs` options both benchmarks take, with the defaults the docs quote. */
export const placementOptions = {
  // Frankfurt ↔ US east is ~80-90 ms; a Worker in the database's region, a few ms.
  "far-edge-rtt": { type: "string", default: "80" },
  "near-db-rtt": { type: "string", default: "5" },
} as const;

export function placementRtts(values: { "far-edge-rtt"?: string; "near-db-rtt"?: string }): PlacementRtts {
  const farEdge = msOption("far-edge-rtt", values["far-edge-rtt"]);
  const nearDatabase = msOption("near-db-rtt", values["near-db-rtt"]);
  // The comparison divides by the difference (see explainedByRoundTrips).
  if (farEdge <= nearDatabase) {
    throw new BenchUsageError(
      `--far-edge-rtt (${farEdge}) must be larger than --near-db-rtt (${nearDatabase})`,
    );
  }
  return { farEdge, nearDatabase };
}

/**
 * Each repetition measures both placements back to back, in alternating order
 * (far first in odd repetitions), so a burst of load from another process on
 * this shared machine falls on both about equally.
 */
export const placementOrder = (rep: number): readonly Placement[] =>
  rep % 2 === 1 ? PLACEMENTS : [...PLACEMENTS].reverse();

/** Per-repetition ratios, far edge over near the database. */
export const farOverNear = (far: Summary, near: Summary): Summary =>
  summarize(far.runs.map((x, i) => x / near.runs[i]!));

/**
 * How much of the far-edge minus near-database difference the round trips alone
 * explain: (far − near) / (round trips × (far RTT − near RTT)), per repetition.
 * 1 means the difference is exactly round trips × RTT; above 1, something else
 * stretched with distance (e.g. a round trip the count missed).
 */
export function explainedByRoundTrips(
  far: Summary,
  near: Summary,
  roundTrips: Summary,
  rtts: PlacementRtts,
): Summary {
  return summarize(
    far.runs.map((x, i) => (x - near.runs[i]!) / (roundTrips.runs[i]! * (rtts.farEdge - rtts.nearDatabase))),
  );
}
