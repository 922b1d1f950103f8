// Phases 1, 2, 3 and 8: the plain-SQL ceilings (today's schema, with v7 ids, and
// the bare table), the relay with the null publisher and the relay through
// @upstash/qstash to the dev server, each draining the same backlog in its own
// process (whose peak memory and CPU time are phase 8). All run interleaved in every
// repetition, so drift on a shared machine hits them alike.
import type { BenchContext } from "../support/context.ts";
import { BARE_TABLE, createBareTableSql } from "../support/ceiling.ts";
import { resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { runRelayProcess, type RelayProcessInput, type RelayProcessOutput } from "../support/child.ts";
import { log } from "../support/progress.ts";
import { summarize, type Summary } from "../support/stats.ts";

/**
 * Every drain the phase times, by its key in the JSON. `ceiling` is today's schema
 * (UUIDv7 ids, migration 0007); `ceilingSchemaBefore` the same table as it was before
 * 0007 (random v4 ids, an index on fanned rows), so what 0007 bought is measured in
 * the same run; `bareCeiling` the minimal table (primary key and claim index only),
 * the physical limit. `nullBefore` and
 * `qstashBefore` run another checkout's relay (`--baseline`), so a change to the
 * relay is measured before and after in the same run.
 */
export type Variant =
  "ceiling" | "ceilingSchemaBefore" | "bareCeiling" | "null" | "qstash" | "nullBefore" | "qstashBefore";

interface VariantSetup {
  input: Omit<RelayProcessInput, "url" | "batchSize">;
  table?: string;
  ids?: "random";
  /** Run on `events` before the seed, and `undo` after the drain. */
  schema?: { apply: string; undo: string };
}

function variants(ctx: BenchContext): Partial<Record<Variant, VariantSetup>> {
  const qstash = { url: ctx.qstash.url, token: ctx.qstash.token };
  const base = ctx.baselineOutbox;
  return {
    ceiling: { input: { mode: "ceiling" } },
    ceilingSchemaBefore: { input: { mode: "ceiling" }, ids: "random", schema: SCHEMA_BEFORE_0007 },
    bareCeiling: { input: { mode: "ceiling", table: BARE_TABLE }, table: BARE_TABLE },
    null: { input: { mode: "null" } },
    ...(base ? { nullBefore: { input: { mode: "null", outbox: base } } } : {}),
    qstash: { input: { mode: "qstash", qstash } },
    ...(base ? { qstashBefore: { input: { mode: "qstash", qstash, outbox: base } } } : {}),
  };
}

/** The index migration 0007 dropped (the ids come from `ids: "random"`). */
const SCHEMA_BEFORE_0007 = {
  apply: `CREATE INDEX bench_events_fanned_out_at_idx ON events (fanned_out_at) WHERE fanned_out_at IS NOT NULL`,
  undo: `DROP INDEX bench_events_fanned_out_at_idx`,
};

export interface ModeResult {
  eventsPerSecond: Summary;
  jobsPerSecond: Summary;
  /** CPU time of the relay (or ceiling) process per 1,000 events drained, ms. */
  cpuMsPer1000Events: Summary;
  peakRssMB: Summary;
  peakHeapMB: Summary;
  baselineRssMB: Summary;
  raw: RelayProcessOutput[];
}

/** Every variant ran unless `--variants` chose some. */
export type ThroughputResult = Partial<Record<Variant, ModeResult>>;

const MB = 1024 * 1024;

export async function throughput(ctx: BenchContext): Promise<ThroughputResult> {
  const setups = (Object.entries(variants(ctx)) as [Variant, VariantSetup][]).filter(
    ([v]) => !ctx.variants || ctx.variants.includes(v),
  );
  const unknown = ctx.variants?.filter((v) => !(v in variants(ctx))) ?? [];
  if (unknown.length > 0) throw new Error(`unknown throughput variants ${unknown.join(", ")}`);
  const raw: Partial<Record<Variant, RelayProcessOutput[]>> = {};
  const { rows } = await ctx.db.admin.query<{ options: string[] | null }>(
    `SELECT reloptions AS options FROM pg_class WHERE oid = 'events'::regclass`,
  );
  await ctx.db.admin.query(createBareTableSql(rows[0]?.options ?? []));
  for (let rep = 1; rep <= ctx.reps; rep++) {
    for (const [mode, setup] of setups) {
      await resetOutbox(ctx.db.admin);
      if (setup.schema) await ctx.db.admin.query(setup.schema.apply);
      await seedBacklog(ctx.db.admin, ctx.sizes.backlog, {
        ...(setup.table ? { table: setup.table } : {}),
        ...(setup.ids ? { ids: setup.ids } : {}),
      });
      await settle(ctx.db.admin, setup.table);
      await ctx.qstash.reset();
      const out = await runRelayProcess({ url: ctx.db.url, batchSize: ctx.batchSize, ...setup.input });
      const left = await unfanned(ctx.db.admin, setup.table);
      if (setup.schema) await ctx.db.admin.query(setup.schema.undo);
      if (out.events !== ctx.sizes.backlog || left !== 0) {
        throw new Error(`${mode}: drained ${out.events} of ${ctx.sizes.backlog}, ${left} left`);
      }
      (raw[mode] ??= []).push(out);
      log(
        `throughput rep ${rep}/${ctx.reps} ${mode.padEnd(16)} ${Math.round(out.events / (out.ms / 1000))} events/s` +
          `, ${(out.cpuMicros / out.events).toFixed(1)} ms CPU per 1,000 events` +
          (out.jobs ? `, ${Math.round(out.jobs / (out.ms / 1000))} jobs/s` : "") +
          `, peak RSS ${(out.peakRssBytes / MB).toFixed(0)} MB`,
      );
    }
  }
  const result = {} as ThroughputResult;
  for (const [mode] of setups) {
    const runs = raw[mode]!;
    result[mode] = {
      eventsPerSecond: summarize(runs.map((r) => r.events / (r.ms / 1000))),
      jobsPerSecond: summarize(runs.map((r) => r.jobs / (r.ms / 1000))),
      // µs per event is ms per 1,000 events.
      cpuMsPer1000Events: summarize(runs.map((r) => r.cpuMicros / r.events)),
      peakRssMB: summarize(runs.map((r) => r.peakRssBytes / MB)),
      peakHeapMB: summarize(runs.map((r) => r.peakHeapBytes / MB)),
      baselineRssMB: summarize(runs.map((r) => r.baselineRssBytes / MB)),
      raw: runs,
    };
  }
  return result;
}
