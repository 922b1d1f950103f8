// Phase 4: 1, 2, 4 and 8 relays, each on its own connection, draining one backlog
// together through one shared (null) transport. SKIP LOCKED must not collapse, and
// no (event, subscription) may be published twice.
import type pg from "pg";
import { createNullPublisher, type Job, type Publisher } from "../../src/outbox/index.ts";
import type { BenchContext } from "../support/context.ts";
import { incompleteFanouts, resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { summarize, type Summary } from "../support/stats.ts";
import { drainTogether } from "../support/subscriptions.ts";

export const RELAY_COUNTS = [1, 2, 4, 8] as const;

export interface ConcurrencyRun {
  relays: number;
  ms: number;
  events: number;
  jobs: number;
  /** Deduplication ids (event:subscription) accepted more than once. Must be 0. */
  duplicates: number;
  /** Fanned rows whose fanout does not name both subscriptions. Must be 0. */
  incompleteFanout: number;
  /** Events each relay fanned: all of them worked, so their passes really overlapped. */
  perRelay: number[];
}

export interface ConcurrencyResult {
  eventsPerSecond: Record<number, Summary>;
  duplicates: number;
  incompleteFanout: number;
  raw: ConcurrencyRun[];
}

/** A publisher (the null one by default), plus a record of every deduplication id it accepted. */
export function countingPublisher(inner: Publisher = createNullPublisher()): {
  publisher: Publisher;
  seen: Set<string>;
  duplicates: () => number;
} {
  const seen = new Set<string>();
  let duplicates = 0;
  return {
    seen,
    duplicates: () => duplicates,
    publisher: {
      publish(jobs: Job[], signal) {
        for (const job of jobs) {
          if (seen.has(job.deduplicationId)) duplicates++;
          else seen.add(job.deduplicationId);
        }
        return inner.publish(jobs, signal);
      },
    },
  };
}

export async function concurrency(ctx: BenchContext): Promise<ConcurrencyResult> {
  const raw: ConcurrencyRun[] = [];
  for (let rep = 1; rep <= ctx.reps; rep++) {
    for (const relays of RELAY_COUNTS) {
      await resetOutbox(ctx.db.admin);
      await seedBacklog(ctx.db.admin, ctx.sizes.backlog);
      await settle(ctx.db.admin);
      const pools: pg.Pool[] = Array.from({ length: relays }, () => ctx.db.newPool(1));
      await Promise.all(pools.map(async (p) => (await p.connect()).release()));
      const { publisher, seen, duplicates } = countingPublisher();
      const started = performance.now();
      const results = await drainTogether(pools, publisher, ctx.batchSize);
      const ms = performance.now() - started;
      await Promise.all(pools.map((p) => p.end()));
      const events = results.reduce((sum, r) => sum + r.fanned, 0);
      const left = await unfanned(ctx.db.admin);
      const run: ConcurrencyRun = {
        relays,
        ms,
        events,
        jobs: seen.size,
        duplicates: duplicates(),
        incompleteFanout: await incompleteFanouts(ctx.db.admin),
        perRelay: results.map((r) => r.fanned),
      };
      if (events !== ctx.sizes.backlog || left !== 0) {
        throw new Error(`${relays} relays fanned ${events} of ${ctx.sizes.backlog}, ${left} left`);
      }
      raw.push(run);
      log(
        `concurrency rep ${rep}/${ctx.reps} ${relays} relay(s): ${Math.round(events / (ms / 1000))} events/s, ` +
          `duplicates ${run.duplicates}, per relay [${run.perRelay.join(", ")}]`,
      );
    }
  }
  const eventsPerSecond: Record<number, Summary> = {};
  for (const n of RELAY_COUNTS) {
    eventsPerSecond[n] = summarize(raw.filter((r) => r.relays === n).map((r) => r.events / (r.ms / 1000)));
  }
  return {
    eventsPerSecond,
    duplicates: raw.reduce((sum, r) => sum + r.duplicates, 0),
    incompleteFanout: raw.reduce((sum, r) => sum + r.incompleteFanout, 0),
    raw,
  };
}
