// Phase 6: database round trips per pass, counted (not timed) by wrapping the
// client's query(): one call is one simple-protocol message and its answer.
import { createNullPublisher, runPass } from "../../src/outbox/index.ts";
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
  max: number;
}

export async function roundTrips(ctx: BenchContext): Promise<RoundTripResult> {
  await resetOutbox(ctx.db.admin);
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
    return { perPass, emptyPass, max: Math.max(emptyPass, ...Object.values(perPass).flat()) };
  } finally {
    await inner.end();
  }
}
