// Phase 5: does the claim get slower with history, and does a pass get slower as a
// long drain goes on? Claims are the relay's own claim() (BEGIN + relay state +
// claim in one round trip), rolled back so every sample claims the same backlog.
import type pg from "pg";
import { createNullPublisher, runPass } from "../../src/outbox/index.ts";
import { claim, claimSql } from "../../src/outbox/relay/claim.ts";
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { median, percentile, summarize, type Summary } from "../support/stats.ts";
import { benchSubscriptions } from "../support/subscriptions.ts";

export interface ClaimLatency {
  p50: Summary;
  p99: Summary;
  /** Buffers (shared hit + read) the claim touched, from EXPLAIN (ANALYZE, BUFFERS). */
  buffers: number;
  raw: number[][];
}

export interface DrainProbe {
  /** Fraction of the drain done when the probe ran. */
  at: number;
  claimBuffers: number;
  deadTuples: number;
  autovacuums: number;
}

export interface LongDrainRun {
  passMs: number[];
  early: number;
  late: number;
  probes: DrainProbe[];
}

export interface HistoryResult {
  claimEmpty: ClaimLatency;
  claimWithHistory: ClaimLatency;
  historyRows: number;
  /** Median pass time over the first 5% of the drain, and from 75% to 80% drained. */
  earlyPassMs: Summary;
  latePassMs: Summary;
  drains: LongDrainRun[];
}

async function claimBuffers(pool: pg.Pool, batchSize: number): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    const { rows } = await client.query(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${claimSql(batchSize, undefined)}`,
    );
    const plan = (rows[0] as { "QUERY PLAN": { Plan: Record<string, number> }[] })["QUERY PLAN"][0]!.Plan;
    return (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0);
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
}

async function claimLatency(ctx: BenchContext, label: string): Promise<ClaimLatency> {
  const pool = ctx.db.newPool(1);
  const client = await pool.connect();
  const raw: number[][] = [];
  try {
    // Warm-up: plan caches and buffers, so the first samples are not the slowest.
    for (let i = 0; i < 20; i++) {
      await claim(client, ctx.batchSize, undefined);
      await client.query("ROLLBACK");
    }
    for (let rep = 1; rep <= ctx.reps; rep++) {
      const samples: number[] = [];
      for (let i = 0; i < ctx.sizes.claimSamples; i++) {
        const started = performance.now();
        const { events } = await claim(client, ctx.batchSize, undefined);
        samples.push(performance.now() - started);
        await client.query("ROLLBACK");
        if (events.length !== ctx.batchSize) throw new Error(`claim returned ${events.length} rows`);
      }
      raw.push(samples);
      log(
        `claim ${label} rep ${rep}/${ctx.reps}: p50 ${median(samples).toFixed(2)} ms, p99 ${percentile(samples, 99).toFixed(2)} ms`,
      );
    }
  } finally {
    client.release();
    await pool.end();
  }
  return {
    p50: summarize(raw.map((s) => median(s))),
    p99: summarize(raw.map((s) => percentile(s, 99))),
    buffers: await claimBuffers(ctx.db.admin, ctx.batchSize),
    raw,
  };
}

async function tableStats(admin: pg.Pool): Promise<{ deadTuples: number; autovacuums: number }> {
  const { rows } = await admin.query<{ dead: string; autovacuums: string }>(
    `SELECT n_dead_tup AS dead, autovacuum_count AS autovacuums FROM pg_stat_user_tables WHERE relname = 'events'`,
  );
  return { deadTuples: Number(rows[0]?.dead ?? 0), autovacuums: Number(rows[0]?.autovacuums ?? 0) };
}

/** One long drain with the relay (null publisher), every pass timed; probes at 0%, 50% and 75%. */
async function longDrain(ctx: BenchContext): Promise<LongDrainRun> {
  const n = ctx.sizes.longDrain;
  await resetOutbox(ctx.db.admin);
  await seedBacklog(ctx.db.admin, n);
  await settle(ctx.db.admin);
  const pool = ctx.db.newPool(1);
  (await pool.connect()).release();
  const publisher = createNullPublisher();
  const passMs: number[] = [];
  const probes: DrainProbe[] = [];
  const probeAt = [0, 0.5, 0.75];
  let drained = 0;
  try {
    for (;;) {
      if (probeAt.length > 0 && drained >= probeAt[0]! * n) {
        probes.push({
          at: probeAt.shift()!,
          claimBuffers: await claimBuffers(ctx.db.admin, ctx.batchSize),
          ...(await tableStats(ctx.db.admin)),
        });
      }
      const started = performance.now();
      const pass = await runPass({
        pool,
        publisher,
        subscriptions: benchSubscriptions,
        batchSize: ctx.batchSize,
      });
      if (pass.claimed === 0) break;
      passMs.push(performance.now() - started);
      drained += pass.fanned;
    }
  } finally {
    await pool.end();
  }
  if (drained !== n || (await unfanned(ctx.db.admin)) !== 0)
    throw new Error(`long drain fanned ${drained} of ${n}`);
  const passes = passMs.length;
  const early = median(passMs.slice(0, Math.max(1, Math.round(passes * 0.05))));
  const late = median(passMs.slice(Math.round(passes * 0.75), Math.round(passes * 0.8)));
  return { passMs, early, late, probes };
}

export async function history(ctx: BenchContext): Promise<HistoryResult> {
  // Claim latency with no history: only the backlog the claim takes from.
  await resetOutbox(ctx.db.admin);
  await seedBacklog(ctx.db.admin, ctx.sizes.claimBacklog);
  await settle(ctx.db.admin);
  const claimEmpty = await claimLatency(ctx, "no history");

  // The same backlog behind a long, already-fanned history (as after months of use).
  await resetOutbox(ctx.db.admin);
  log(`seeding ${ctx.sizes.history.toLocaleString("en")} fanned rows of history`);
  await seedBacklog(ctx.db.admin, ctx.sizes.history, { fanned: true });
  await seedBacklog(ctx.db.admin, ctx.sizes.claimBacklog);
  await settle(ctx.db.admin);
  const claimWithHistory = await claimLatency(ctx, `${ctx.sizes.history.toLocaleString("en")} fanned`);

  const drains: LongDrainRun[] = [];
  for (let rep = 1; rep <= ctx.reps; rep++) {
    const run = await longDrain(ctx);
    drains.push(run);
    const p = run.probes.map((x) => `${x.at * 100}%: ${x.claimBuffers} buffers, ${x.deadTuples} dead`);
    log(
      `long drain rep ${rep}/${ctx.reps} (${ctx.sizes.longDrain.toLocaleString("en")} events): ` +
        `early pass ${run.early.toFixed(2)} ms, at 75% ${run.late.toFixed(2)} ms; claim ${p.join("; ")}`,
    );
  }
  return {
    claimEmpty,
    claimWithHistory,
    historyRows: ctx.sizes.history,
    earlyPassMs: summarize(drains.map((d) => d.early)),
    latePassMs: summarize(drains.map((d) => d.late)),
    drains,
  };
}
