// Phases 1, 2, 3 and 8: the plain-SQL ceilings (today's schema, as before migration
// 0010, and the bare table), the relay with the null publisher and the relay through
// @upstash/qstash to the accept-only endpoint and to the dev server, each draining the same backlog in its own
// process (whose peak memory and CPU time are phase 8). All run interleaved in every
// repetition, so drift on a shared machine hits them alike.
import type { BenchContext } from "../support/context.ts";
import {
  BARE_TABLE,
  BROWSE_INDEX_CANDIDATES,
  ceilingSql,
  createBareTableSql,
  type BrowseIndexCandidate,
} from "../support/ceiling.ts";
import { resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { runRelayProcess, type RelayProcessInput, type RelayProcessOutput } from "../support/child.ts";
import { log } from "../support/progress.ts";
import { summarize, type Summary } from "../support/stats.ts";

/**
 * Every drain the phase times, by its key in the JSON. `ceiling` is today's schema
 * (UUIDv7 ids, migration 0007; only the relay's indexes on `events` and the mark's
 * per-minute count, migration 0010); `ceilingSchemaBefore` the same table as it was
 * before 0010 (the events page's four indexes and the index on fanned rows on
 * `events`, no count; sequential subjects, as `ceiling`'s), so what 0010 bought is measured in the same run;
 * `ceilingWithoutCount` today's table without the count, its price;
 * `ceilingIdIndexOnEvents` today's table with the unique index on `id` back on
 * `events`, as before migration 0011 (ADR 0021), so what 0011 bought is measured in
 * the same run too; `bareCeiling`
 * the minimal table (primary key and claim index only), the physical limit.
 * `acceptOnly` is the relay through @upstash/qstash to
 * infra/qstash-accept-only.ts, which answers and does nothing else; `qstash` the
 * same to the dev server, whose own CPU is the limit there. `nullBefore`,
 * `acceptOnlyBefore` and `qstashBefore` run another checkout's relay (`--baseline`), so a change to the
 * relay is measured before and after in the same run.
 */
export type Variant =
  | "ceiling"
  | "ceilingSchemaBefore"
  | "ceilingWithoutCount"
  | "ceilingIdIndexOnEvents"
  | "bareCeiling"
  | "null"
  | "acceptOnly"
  | "qstash"
  | "nullBefore"
  | "acceptOnlyBefore"
  | "qstashBefore"
  | `ceilingWith:${BrowseIndexCandidate}`;

interface VariantSetup {
  input: Omit<RelayProcessInput, "url" | "batchSize">;
  table?: string;
  /** Created on `events` before the seed and dropped after the drain (an index candidate's cost on the mark). */
  indexes?: readonly string[];
  subjects?: "random";
}

function variants(ctx: BenchContext): Partial<Record<Variant, VariantSetup>> {
  const qstash = { url: ctx.qstash.url, token: ctx.qstash.token };
  const base = ctx.baselineOutbox;
  return {
    // `indexes` (none added for `ceiling`): each repetition also probes the mark's WAL.
    ceiling: { input: { mode: "ceiling", counter: true }, indexes: [] },
    ceilingSchemaBefore: { input: { mode: "ceiling" }, indexes: INDEXES_BEFORE_0010 },
    ceilingWithoutCount: { input: { mode: "ceiling" } },
    ceilingIdIndexOnEvents: { input: { mode: "ceiling", counter: true }, indexes: [ID_UNIQUE_ON_EVENTS] },
    bareCeiling: { input: { mode: "ceiling", table: BARE_TABLE }, table: BARE_TABLE },
    null: { input: { mode: "null" } },
    // Right after `null`, so their ratio compares drains that ran back to back.
    acceptOnly: {
      input: { mode: "qstash", qstash: { url: ctx.acceptOnly.url, token: ctx.acceptOnly.token } },
    },
    ...(base
      ? {
          // Right after `acceptOnly`: the earlier checkout's relay through the SDK to the
          // same endpoint, for the SDK path's CPU per event before and after.
          acceptOnlyBefore: {
            input: {
              mode: "qstash",
              qstash: { url: ctx.acceptOnly.url, token: ctx.acceptOnly.token },
              outbox: base,
            },
          },
          nullBefore: { input: { mode: "null", outbox: base } },
        }
      : {}),
    qstash: { input: { mode: "qstash", qstash } },
    ...(base ? { qstashBefore: { input: { mode: "qstash", qstash, outbox: base } } } : {}),
    // `ceilingWith:<candidate>`: the ceiling on today's schema plus one candidate set
    // of indexes for the dashboard's events page (ADR 0013), to price each on the mark
    // in the same run. Seeded subjects are random, as real ones (note ids, order ids)
    // are: sequential ones would put a batch's entries on a few neighbouring leaf
    // pages of a subject index and flatter it.
    ...Object.fromEntries(
      Object.entries(BROWSE_INDEX_CANDIDATES).map(([name, indexes]) => [
        `ceilingWith:${name}`,
        { input: { mode: "ceiling" }, indexes, subjects: "random" } satisfies VariantSetup,
      ]),
    ),
  };
}

/** The unique index on `events.id` that migration 0011 moved to events_browse (ADR 0021). */
const ID_UNIQUE_ON_EVENTS = "CREATE UNIQUE INDEX bench_events_id_unique ON events (id)";

/**
 * `events` as it was before migration 0010: the events page's four indexes (ADR
 * 0013), the index on fanned rows (0008) and the unique id (until 0011) on `events`
 * itself, each of which the mark, a non-HOT update, gave an entry per marked row.
 */
const INDEXES_BEFORE_0010 = [
  ...BROWSE_INDEX_CANDIDATES.chosen,
  "CREATE INDEX bench_events_fanned_out_at_idx ON events (fanned_out_at) WHERE fanned_out_at IS NOT NULL",
  ID_UNIQUE_ON_EVENTS,
];

export interface ModeResult {
  eventsPerSecond: Summary;
  jobsPerSecond: Summary;
  /** CPU time of the relay (or ceiling) process per 1,000 events drained, ms. */
  cpuMsPer1000Events: Summary;
  /** CPU time of the drain's Postgres backend per 1,000 events, ms: the database's side of the work. */
  backendCpuMsPer1000Events: Summary;
  peakRssMB: Summary;
  peakHeapMB: Summary;
  baselineRssMB: Summary;
  /** Drains with `indexes` only: what one mark writes per event, from EXPLAIN (ANALYZE, BUFFERS, WAL). */
  markPerEvent?: MarkCost;
  raw: RelayProcessOutput[];
}

/**
 * Per marked event, medians over the repetitions. Unlike events/s these barely move
 * with the load other processes put on a shared machine, so they show an index's
 * cost on the mark where the timings are too noisy to.
 */
export interface MarkCost {
  walRecords: Summary;
  walBytes: Summary;
  /** Full-page images: the first change to a page after a checkpoint. */
  walFullPageImages: Summary;
  buffersDirtied: Summary;
  buffersTouched: Summary;
}

const MARK_PROBE_BATCHES = 10;

/**
 * Marks MARK_PROBE_BATCHES batches under EXPLAIN (ANALYZE, BUFFERS, WAL), on top of
 * the drained table (its history), of a backlog written after a checkpoint: a relay
 * a few milliseconds behind its writers marks rows whose index pages the insert
 * already dirtied in the same checkpoint cycle, so their full-page images were the
 * insert's, not the mark's. (The drain above starts right after a checkpoint, so its
 * figure includes them.)
 */
async function probeMark(ctx: BenchContext, setup: VariantSetup): Promise<Record<keyof MarkCost, number>> {
  await settle(ctx.db.admin);
  await seedBacklog(
    ctx.db.admin,
    MARK_PROBE_BATCHES * ctx.batchSize,
    setup.subjects ? { subjects: setup.subjects } : {},
  );
  await ctx.db.admin.query("ANALYZE events");
  const sum = { walRecords: 0, walBytes: 0, walFullPageImages: 0, buffersDirtied: 0, buffersTouched: 0 };
  let events = 0;
  for (let i = 0; i < MARK_PROBE_BATCHES; i++) {
    const { rows } = await ctx.db.admin.query(
      `EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) ${ceilingSql(ctx.batchSize)}`,
    );
    const plan = (rows[0] as { "QUERY PLAN": { Plan: Record<string, number> }[] })["QUERY PLAN"][0]!.Plan;
    events += plan["Actual Rows"]!;
    sum.walRecords += plan["WAL Records"]!;
    sum.walBytes += plan["WAL Bytes"]!;
    sum.walFullPageImages += plan["WAL FPI"]!;
    sum.buffersDirtied += plan["Shared Dirtied Blocks"]!;
    sum.buffersTouched += plan["Shared Hit Blocks"]! + plan["Shared Read Blocks"]!;
  }
  if (events !== MARK_PROBE_BATCHES * ctx.batchSize) throw new Error(`mark probe marked ${events} events`);
  return Object.fromEntries(Object.entries(sum).map(([k, v]) => [k, v / events])) as Record<
    keyof MarkCost,
    number
  >;
}

/** Every variant ran unless `--variants` chose some. */
export type ThroughputResult = Partial<Record<Variant, ModeResult>>;

const MB = 1024 * 1024;

/** `CREATE [UNIQUE] INDEX <name> ON ...` → name. */
function indexName(sql: string): string {
  const name = /^CREATE (?:UNIQUE )?INDEX (\w+) /.exec(sql)?.[1];
  if (!name) throw new Error(`not a CREATE [UNIQUE] INDEX <name>: ${sql}`);
  return name;
}

export async function throughput(ctx: BenchContext): Promise<ThroughputResult> {
  const setups = (Object.entries(variants(ctx)) as [Variant, VariantSetup][]).filter(
    ([v]) => !ctx.variants || ctx.variants.includes(v),
  );
  const unknown = ctx.variants?.filter((v) => !(v in variants(ctx))) ?? [];
  if (unknown.length > 0) throw new Error(`unknown throughput variants ${unknown.join(", ")}`);
  const raw: Partial<Record<Variant, RelayProcessOutput[]>> = {};
  const marks: Partial<Record<Variant, Record<keyof MarkCost, number>[]>> = {};
  const { rows } = await ctx.db.admin.query<{ options: string[] | null }>(
    `SELECT reloptions AS options FROM pg_class WHERE oid = 'events'::regclass`,
  );
  await ctx.db.admin.query(createBareTableSql(rows[0]?.options ?? []));
  for (let rep = 1; rep <= ctx.reps; rep++) {
    for (const [mode, setup] of setups) {
      await resetOutbox(ctx.db.admin);
      if (setup.indexes) for (const sql of setup.indexes) await ctx.db.admin.query(sql);
      await seedBacklog(ctx.db.admin, ctx.sizes.backlog, {
        ...(setup.table ? { table: setup.table } : {}),
        ...(setup.subjects ? { subjects: setup.subjects } : {}),
      });
      await settle(ctx.db.admin, setup.table);
      await ctx.qstash.reset();
      const out = await runRelayProcess({ url: ctx.db.url, batchSize: ctx.batchSize, ...setup.input });
      const left = await unfanned(ctx.db.admin, setup.table);
      if (setup.indexes) {
        (marks[mode] ??= []).push(await probeMark(ctx, setup));
        for (const name of setup.indexes.map(indexName)) await ctx.db.admin.query(`DROP INDEX ${name}`);
      }
      if (out.events !== ctx.sizes.backlog || left !== 0) {
        throw new Error(`${mode}: drained ${out.events} of ${ctx.sizes.backlog}, ${left} left`);
      }
      (raw[mode] ??= []).push(out);
      log(
        `throughput rep ${rep}/${ctx.reps} ${mode.padEnd(16)} ${Math.round(out.events / (out.ms / 1000))} events/s` +
          `, ${(out.cpuMicros / out.events).toFixed(1)} ms CPU per 1,000 events` +
          ` (backend ${((out.backendCpuMs * 1000) / out.events).toFixed(1)})` +
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
      backendCpuMsPer1000Events: summarize(runs.map((r) => (r.backendCpuMs * 1000) / r.events)),
      peakRssMB: summarize(runs.map((r) => r.peakRssBytes / MB)),
      peakHeapMB: summarize(runs.map((r) => r.peakHeapBytes / MB)),
      baselineRssMB: summarize(runs.map((r) => r.baselineRssBytes / MB)),
      ...(marks[mode]
        ? {
            markPerEvent: Object.fromEntries(
              (Object.keys(marks[mode]![0]!) as (keyof MarkCost)[]).map((k) => [
                k,
                summarize(marks[mode]!.map((m) => m[k])),
              ]),
            ) as unknown as MarkCost,
          }
        : {}),
      raw: runs,
    };
  }
  return result;
}
