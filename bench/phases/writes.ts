// Phase `writes`: what recording an event costs the writer, on today's schema and on
// `events` as it was before migration 0010 (docs/adr/0016), interleaved in every
// repetition. 0010 moved the events page's four indexes off `events` onto
// events_browse, which a statement trigger writes with each event: a write now
// inserts a second heap row and runs the trigger, and `events` itself carries four
// fewer index entries per row.
import type pg from "pg";
import { BROWSE_INDEX_CANDIDATES } from "../support/ceiling.ts";
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, settle } from "../support/db.ts";
import { processCpuMs } from "../support/process-cpu.ts";
import { log } from "../support/progress.ts";
import { summarize, type Summary } from "../support/stats.ts";

export type WriteLayout = "today" | "before0010";

export interface WriteLoadResult {
  eventsPerSecond: Summary;
  /** CPU time of the writing connection's Postgres backend per 1,000 events, ms. */
  backendCpuMsPer1000Events: Summary;
}

export interface WritesResult {
  /** One event per transaction, as recordEvent writes one inside each change (commit included). */
  single: Record<WriteLayout, WriteLoadResult>;
  /** Many single-row INSERTs in one transaction: the per-statement cost without a commit each. */
  batched: Record<WriteLayout, WriteLoadResult>;
  /** One INSERT … SELECT of many rows (an import): the trigger runs once. */
  bulk: Record<WriteLayout, WriteLoadResult>;
}

/** The schema before 0010: the four page indexes and the fanned index on `events`, no insert trigger. */
const BEFORE_0010 = {
  apply: [
    "ALTER TABLE events DISABLE TRIGGER events_inserted",
    ...BROWSE_INDEX_CANDIDATES.chosen,
    "CREATE INDEX bench_events_fanned_out_at_idx ON events (fanned_out_at) WHERE fanned_out_at IS NOT NULL",
  ],
  undo: [
    "ALTER TABLE events ENABLE TRIGGER events_inserted",
    `DROP INDEX bench_events_seq_created_brin, bench_events_type_seq_idx, bench_events_scope_seq_idx,
                bench_events_subject_seq_idx, bench_events_fanned_out_at_idx`,
  ],
};

/** recordEvent's statement, parameters and all (subjects random-looking, as note ids are). */
const INSERT = `INSERT INTO events (type, subject, scope, payload) VALUES ($1, $2, $3, $4) RETURNING id, seq`;
const row = (i: number) => [
  "bench.recorded",
  `note-${(i * 2654435761) % 4294967296}`,
  `tenant-${i % 10}`,
  JSON.stringify({ n: i, pad: "x".repeat(150) }),
];

interface Timed {
  events: number;
  ms: number;
  backendMs: number;
}

async function timed(client: pg.PoolClient, events: number, work: () => Promise<void>): Promise<Timed> {
  const pid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
  // 0 for a server on another machine, as for the drains.
  const backendCpu = () => processCpuMs(pid) ?? 0;
  const cpu = backendCpu();
  const started = performance.now();
  await work();
  return { events, ms: performance.now() - started, backendMs: backendCpu() - cpu };
}

async function load(client: pg.PoolClient, kind: keyof WritesResult, n: number): Promise<Timed> {
  if (kind === "bulk") {
    return timed(client, n, async () => {
      await client.query(
        `INSERT INTO events (type, subject, scope, payload)
         SELECT 'bench.imported', md5(g::text), 'tenant-' || (g % 10), jsonb_build_object('n', g, 'pad', repeat('x', 150))
           FROM generate_series(1, ${n}) g`,
      );
    });
  }
  return timed(client, n, async () => {
    if (kind === "batched") await client.query("BEGIN");
    for (let i = 0; i < n; i++) await client.query(INSERT, row(i));
    if (kind === "batched") await client.query("COMMIT");
  });
}

const SIZES: Record<keyof WritesResult, { full: number; quick: number }> = {
  single: { full: 3_000, quick: 500 },
  batched: { full: 10_000, quick: 2_000 },
  bulk: { full: 100_000, quick: 10_000 },
};

export async function writes(ctx: BenchContext): Promise<WritesResult> {
  const raw: Record<string, Timed[]> = {};
  const pool = ctx.db.newPool(1);
  const quick = ctx.sizes.backlog < 100_000;
  try {
    for (let rep = 1; rep <= ctx.reps; rep++) {
      // Each load on both layouts back to back, so a burst of load hits both alike.
      for (const kind of ["single", "batched", "bulk"] as const) {
        for (const layout of ["today", "before0010"] as const) {
          await resetOutbox(ctx.db.admin);
          if (layout === "before0010") for (const sql of BEFORE_0010.apply) await ctx.db.admin.query(sql);
          await settle(ctx.db.admin);
          const client = await pool.connect();
          let out: Timed;
          try {
            out = await load(client, kind, SIZES[kind][quick ? "quick" : "full"]);
          } finally {
            client.release();
            if (layout === "before0010") for (const sql of BEFORE_0010.undo) await ctx.db.admin.query(sql);
          }
          (raw[`${kind}:${layout}`] ??= []).push(out);
          log(
            `writes rep ${rep}/${ctx.reps} ${kind.padEnd(7)} ${layout.padEnd(10)} ` +
              `${Math.round(out.events / (out.ms / 1000))} events/s, backend ${((out.backendMs * 1000) / out.events).toFixed(1)} ms per 1,000`,
          );
        }
      }
    }
  } finally {
    await pool.end();
  }
  const summary = (kind: keyof WritesResult, layout: WriteLayout): WriteLoadResult => {
    const runs = raw[`${kind}:${layout}`]!;
    return {
      eventsPerSecond: summarize(runs.map((r) => r.events / (r.ms / 1000))),
      backendCpuMsPer1000Events: summarize(runs.map((r) => (r.backendMs * 1000) / r.events)),
    };
  };
  const both = (kind: keyof WritesResult) => ({
    today: summary(kind, "today"),
    before0010: summary(kind, "before0010"),
  });
  return { single: both("single"), batched: both("batched"), bulk: both("bulk") };
}
