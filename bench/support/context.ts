import type { BenchDatabase } from "./db.ts";
import type { PlacementRtts } from "./placement.ts";
import type { DevServer } from "./qstash.ts";
import type { AcceptOnlyService } from "./service.ts";

export interface Sizes {
  /** Backlog for the ceiling, the relay and the concurrency runs (issue 5: 100,000). */
  backlog: number;
  /** Already-fanned rows for the claim-latency comparison (1,000,000). */
  history: number;
  /** Un-fanned rows the claim-latency comparison claims from. */
  claimBacklog: number;
  /** Claims timed per repetition. */
  claimSamples: number;
  /** The long drain whose early and late passes are compared (200,000). */
  longDrain: number;
  /** Writes per latency repetition (at least 1,000) and their steady rate. */
  latencyWrites: number;
  writesPerSecond: number;
  /** Backlog the production-shaped phase drains with 1 and with 4 relays (issue 11 item 4). */
  productionBacklog: number;
  /** Backlog the placement phase drains at each placement (issue 11 item 8): 20 full passes. */
  placementBacklog: number;
  /** Backlog the Worker's cron sweeps drain, 1 and 4 at once, in the production phase. */
  workerdSweepBacklog: number;
}

export const FULL: Sizes = {
  backlog: 100_000,
  history: 1_000_000,
  claimBacklog: 10_000,
  claimSamples: 500,
  longDrain: 200_000,
  latencyWrites: 1_000,
  writesPerSecond: 100,
  productionBacklog: 20_000,
  placementBacklog: 4_000,
  workerdSweepBacklog: 40_000,
};

export const QUICK: Sizes = {
  backlog: 10_000,
  history: 100_000,
  claimBacklog: 2_000,
  claimSamples: 100,
  longDrain: 20_000,
  latencyWrites: 200,
  writesPerSecond: 100,
  productionBacklog: 4_000,
  placementBacklog: 2_000,
  workerdSweepBacklog: 8_000,
};

export interface BenchContext {
  db: BenchDatabase;
  qstash: DevServer;
  /** The accept-only QStash endpoint, no delay: what the relay through the SDK is measured against. */
  acceptOnly: AcceptOnlyService;
  /** Added latencies of the production-shaped phase (`--db-delay`, `--qstash-delay`). */
  delays: { databaseMs: number; qstashMs: number };
  /** Database round-trip times of the placement phase (`--far-edge-rtt`, `--near-db-rtt`). */
  rtts: PlacementRtts;
  sizes: Sizes;
  reps: number;
  batchSize: number;
  /** `--baseline`: another checkout's src/outbox/index.ts, run beside this one's relay. */
  baselineOutbox?: string;
  /** Only these throughput variants (all by default); the targets that need others are left out. */
  variants?: string[];
}
