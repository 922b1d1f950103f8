// Phase 7: from a write's commit to its jobs being accepted by QStash, through the
// on-write kick as the Worker does it: the write commits (the corpus_notes trigger
// records the event in the same transaction), then the writer immediately starts
// drain({ until: "not-full" }) without waiting for it (ctx.waitUntil on the edge).
// Writes arrive at a steady rate; kicks overlap when the relay is slower than the rate.
import {
  createQStashPublisher,
  drain,
  type DrainResult,
  type Job,
  type Publisher,
  type SqlPool,
} from "../../src/outbox/index.ts";
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, settle } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { distribution, summarize, type Distribution, type Summary } from "../support/stats.ts";
import { LABEL, PUBLIC_URL, benchSubscriptions } from "../support/subscriptions.ts";

/**
 * Writes made first at the same rate and not counted: the first kicks of a fresh
 * process pay for JIT compilation and for opening connections (Postgres and HTTP
 * keep-alive to the dev server), which is start-up, not steady state.
 */
export const WARM_UP_WRITES = 100;

export interface LatencyRun extends Distribution {
  /** Warm-up writes made before the measured ones (not in the samples). */
  warmUp: number;
  /** Events a kick never published, left for the cron sweep. */
  leftForSweep: number;
  kicks: number;
  passes: number;
  /** Actual write rate achieved. */
  writesPerSecond: number;
  samples: number[];
}

export interface LatencyResult {
  p50: Summary;
  p95: Summary;
  p99: Summary;
  max: Summary;
  leftForSweep: number;
  raw: LatencyRun[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Where the kicks run and publish: TCP to Postgres and the dev server here; the production phase swaps both. */
export interface KickTarget {
  /** The kicks' pool; ended after the run. */
  relays: SqlPool & { end(): Promise<void> };
  qstash: { url: string; token: string };
  /** Forgets what the QStash side accepted before, between repetitions. */
  reset(): Promise<void>;
}

/** One repetition: steady writes, each followed by its kick; commit → accepted per write. */
export async function commitToPublished(ctx: BenchContext, target: KickTarget): Promise<LatencyRun> {
  await resetOutbox(ctx.db.admin);
  await settle(ctx.db.admin);
  await target.reset();
  const writers = ctx.db.newPool(4);
  const relays = target.relays;
  (await writers.connect()).release();
  // Each kick takes its own connection, as each Worker invocation has its own.
  (await relays.connect()).release();

  const committedAt = new Map<string, number>();
  const acceptedAt = new Map<string, number>();
  const inner = createQStashPublisher({
    baseUrl: target.qstash.url,
    token: target.qstash.token,
    publicUrl: PUBLIC_URL,
    label: LABEL,
  });
  const publisher: Publisher = {
    async publish(jobs: Job[], signal) {
      const published = await inner.publish(jobs, signal);
      const now = performance.now();
      for (const job of jobs)
        if (!acceptedAt.has(job.body.event.subject)) acceptedAt.set(job.body.event.subject, now);
      return published;
    },
  };

  const kicks: Promise<DrainResult>[] = [];
  const writes: Promise<void>[] = [];
  const interval = 1000 / ctx.sizes.writesPerSecond;
  const total = WARM_UP_WRITES + ctx.sizes.latencyWrites;
  const started = performance.now();
  for (let i = 0; i < total; i++) {
    await sleep(started + i * interval - performance.now());
    writes.push(
      (async () => {
        const { rows } = await writers.query<{ id: string }>(
          `INSERT INTO corpus_notes (title, body) VALUES ($1, $2) RETURNING id`,
          [`note ${i}`, "x".repeat(150)],
        );
        if (i >= WARM_UP_WRITES) committedAt.set(rows[0]!.id, performance.now());
        kicks.push(
          drain({
            pool: relays,
            publisher,
            subscriptions: benchSubscriptions,
            budgetMs: 10_000,
            until: "not-full",
          }),
        );
      })(),
    );
  }
  await Promise.all(writes);
  const writesPerSecond = total / ((performance.now() - started) / 1000);
  const results = await Promise.all(kicks);
  // What the kicks left behind, the cron sweep would publish; it has no kick latency.
  const sweep = await drain({
    pool: relays,
    publisher: inner,
    subscriptions: benchSubscriptions,
    budgetMs: 60_000,
  });
  await Promise.all([writers.end(), relays.end()]);

  const samples: number[] = [];
  for (const [subject, at] of committedAt) {
    const accepted = acceptedAt.get(subject);
    if (accepted !== undefined) samples.push(accepted - at);
  }
  const leftBehind = [...committedAt.keys()].filter((subject) => !acceptedAt.has(subject)).length;
  if (samples.length !== ctx.sizes.latencyWrites - leftBehind || leftBehind > sweep.fanned) {
    throw new Error(`latency: ${samples.length} published by kicks + ${sweep.fanned} by the sweep != writes`);
  }
  return {
    ...distribution(samples),
    warmUp: WARM_UP_WRITES,
    leftForSweep: sweep.fanned,
    kicks: results.length,
    passes: results.reduce((sum, r) => sum + r.passes, 0),
    writesPerSecond,
    samples,
  };
}

export async function latency(ctx: BenchContext): Promise<LatencyResult> {
  const raw: LatencyRun[] = [];
  for (let rep = 1; rep <= ctx.reps; rep++) {
    const run = await commitToPublished(ctx, {
      relays: ctx.db.newPool(8),
      qstash: ctx.qstash,
      reset: () => ctx.qstash.reset(),
    });
    raw.push(run);
    log(
      `latency rep ${rep}/${ctx.reps}: ${run.count} writes at ${run.writesPerSecond.toFixed(0)}/s, commit→accepted ` +
        `p50 ${run.p50.toFixed(1)} ms, p95 ${run.p95.toFixed(1)} ms, p99 ${run.p99.toFixed(1)} ms, ` +
        `max ${run.max.toFixed(1)} ms; left for the sweep: ${run.leftForSweep}`,
    );
  }
  return summarizeLatency(raw);
}

/** The repetitions' distributions, each figure as median with min and max. */
export function summarizeLatency(raw: LatencyRun[]): LatencyResult {
  return {
    p50: summarize(raw.map((r) => r.p50)),
    p95: summarize(raw.map((r) => r.p95)),
    p99: summarize(raw.map((r) => r.p99)),
    max: summarize(raw.map((r) => r.max)),
    leftForSweep: raw.reduce((sum, r) => sum + r.leftForSweep, 0),
    raw,
  };
}
