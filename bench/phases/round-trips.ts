// Phase 6: database round trips per pass, counted (not timed) by wrapping the
// client's query(): one call is one simple-protocol message and its answer.
import { createNullPublisher, drain, runPass } from "../../src/outbox/index.ts";
import type { BenchContext } from "../support/context.ts";
import { CountingPool, resetOutbox, seedBacklog, settle } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { benchSubscriptions } from "../support/subscriptions.ts";

export const ROUND_TRIP_BATCH_SIZES = [1, 50, 200] as const;
const PASSES = 10;

export interface RoundTripResult {
  /** Batch size → round trips of each full pass. */
  perPass: Record<number, number[]>;
  /** A pass that finds nothing to claim. */
  emptyPass: number;
  /** Max over the passes run alone (runPass): the per-pass figure of the table. */
  max: number;
  /**
   * A drain of PASSES full passes and its final empty one: each pass's commit carries
   * the next claim (ADR 0022), so passes + 1 round trips.
   */
  drain: { passes: number; roundTrips: number };
}

export async function roundTrips(ctx: BenchContext): Promise<RoundTripResult> {
  await resetOutbox(ctx.db.admin);
  const drainBatch = ROUND_TRIP_BATCH_SIZES.at(-1)!;
  await seedBacklog(ctx.db.admin, PASSES * ROUND_TRIP_BATCH_SIZES.reduce((a, b) => a + b, 0));
  await settle(ctx.db.admin);
  const inner = ctx.db.newPool(1);
  const pool = new CountingPool(inner);
  const publisher = createNullPublisher();
  const perPass: Record<number, number[]> = {};
  try {
    for (const batchSize of ROUND_TRIP_BATCH_SIZES) {
      perPass[batchSize] = [];
      for (let i = 0; i < PASSES; i++) {
        const before = pool.queries;
        const pass = await runPass({ pool, publisher, subscriptions: benchSubscriptions, batchSize });
        if (pass.fanned !== batchSize) throw new Error(`pass fanned ${pass.fanned}, expected ${batchSize}`);
        perPass[batchSize].push(pool.queries - before);
      }
      log(`round trips at batch size ${batchSize}: ${perPass[batchSize].join(", ")}`);
    }
    const before = pool.queries;
    const empty = await runPass({ pool, publisher, subscriptions: benchSubscriptions });
    if (empty.claimed !== 0) throw new Error("the backlog was not empty");
    const emptyPass = pool.queries - before;

    await seedBacklog(ctx.db.admin, PASSES * drainBatch);
    await settle(ctx.db.admin);
    const beforeDrain = pool.queries;
    const drained = await drain({
      pool,
      publisher,
      subscriptions: benchSubscriptions,
      batchSize: drainBatch,
      budgetMs: 10 * 60_000,
    });
    if (drained.fanned !== PASSES * drainBatch) throw new Error(`drain fanned ${drained.fanned}`);
    const drainResult = { passes: drained.passes, roundTrips: pool.queries - beforeDrain };
    log(`round trips of a drain: ${drainResult.roundTrips} for ${drainResult.passes} passes`);
    return {
      perPass,
      emptyPass,
      max: Math.max(emptyPass, ...Object.values(perPass).flat()),
      drain: drainResult,
    };
  } finally {
    await inner.end();
  }
}
