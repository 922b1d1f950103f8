// Phase 6: what the dashboard's events page costs in the database with a million
// events. Each case is the SQL browseEvents (src/outbox/browse.ts) sends for one
// page, captured and run under EXPLAIN ANALYZE, so the figure is database time
// (planning + execution), not the network or the Worker.
import type pg from "pg";
import { browseEvents, type BrowseOptions, type Queryable } from "../../src/outbox/index.ts";
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, settle } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { median, summarize, type Summary } from "../support/stats.ts";

export interface PageCase {
  name: string;
  options: BrowseOptions;
}

export interface CaseResult {
  name: string;
  /** Median database time of each repetition's samples (ms). */
  ms: Summary;
  returned: number;
  plan: string;
}

export interface DashboardResult {
  rows: number;
  cases: CaseResult[];
  /** The cases over 50 ms again, after creating PROPOSED_INDEXES (not in any migration). */
  withProposedIndexes: CaseResult[];
}

/**
 * What the slow filters would need. Measured here only, to price a migration:
 * every index on events is paid by every write.
 */
export const PROPOSED_INDEXES = [
  "CREATE INDEX bench_events_subject_seq_idx ON events (subject, seq)",
  "CREATE INDEX bench_events_type_pattern_idx ON events (type text_pattern_ops)",
  "CREATE INDEX bench_events_created_at_idx ON events (created_at)",
];

const SAMPLES = 15;

/** The SQL and values browseEvents would send, without sending them. */
async function captured(options: BrowseOptions): Promise<{ text: string; values: unknown[] }> {
  let seen: { text: string; values: unknown[] } | undefined;
  const capture: Queryable = {
    query: async (text, values = []) => {
      seen = { text, values };
      return { rows: [] };
    },
  };
  await browseEvents(capture, options);
  return seen!;
}

interface Explained {
  ms: number;
  returned: number;
  /** The top scan node, e.g. "Index Scan Backward using events_pkey". */
  plan: string;
}

async function explain(client: pg.PoolClient, text: string, values: unknown[]): Promise<Explained> {
  const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
  const [root] = (
    rows[0] as { "QUERY PLAN": { Plan: PlanNode; "Planning Time": number; "Execution Time": number }[] }
  )["QUERY PLAN"];
  let node: PlanNode = root!.Plan;
  while (node.Plans?.length && node["Node Type"] === "Limit") node = node.Plans[0]!;
  const plan = `${node["Node Type"]}${node["Index Name"] ? ` using ${node["Index Name"]}` : ""}`;
  return { ms: root!["Planning Time"] + root!["Execution Time"], returned: root!.Plan["Actual Rows"], plan };
}

interface PlanNode {
  "Node Type": string;
  "Index Name"?: string;
  "Actual Rows": number;
  Plans?: PlanNode[];
}

/**
 * A million events shaped like a year of use: seq follows created_at (one event
 * every ~30 s over a year), 99.5 % fanned, 0.4 % pending, 0.1 % poisoned; 20
 * types (2 of them rare), 100,000 subjects, 50 scopes.
 */
async function seed(admin: pg.Pool, n: number): Promise<void> {
  const chunk = 100_000;
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk);
    await admin.query(
      `INSERT INTO events (type, subject, scope, payload, created_at, fanned_out_at, fanout, attempts, last_error, poisoned_at)
       SELECT CASE WHEN g % 5000 = 0 THEN 'audit.rare.checked'
                   WHEN g % 10 = 1 THEN 'supplier.connected'
                   ELSE 'type' || (g % 18) || '.happened' END,
              'subject-' || (g % 100000), 'tenant-' || (g % 50),
              jsonb_build_object('n', g, 'pad', repeat('x', 150)),
              ts, CASE WHEN state = 'fanned' THEN ts + interval '1 second' END,
              CASE WHEN state = 'fanned' THEN '{"mail":{"messageId":"msg_0"}}'::jsonb END,
              CASE WHEN state = 'poisoned' THEN 5 ELSE 0 END,
              CASE WHEN state = 'poisoned' THEN 'QStash 400: rejected ' || g END,
              CASE WHEN state = 'poisoned' THEN ts + interval '5 minutes' END
         FROM generate_series(${from + 1}::bigint, ${to}::bigint) g,
              LATERAL (SELECT now() - make_interval(secs => (${n} - g) * 30) AS ts,
                              CASE WHEN g % 1000 = 7 THEN 'poisoned'
                                   WHEN g > ${n} - ${Math.round(n * 0.004)} THEN 'pending'
                                   ELSE 'fanned' END AS state) s`,
    );
  }
}

export async function dashboard(ctx: BenchContext): Promise<DashboardResult> {
  const n = ctx.sizes.history;
  const admin = ctx.db.admin;
  await resetOutbox(admin);
  log(`dashboard: seeding ${n.toLocaleString("en")} events`);
  await seed(admin, n);
  await settle(admin);
  const { rows } = await admin.query<{ mid: string; day: Date }>(
    `SELECT (SELECT seq FROM events ORDER BY seq LIMIT 1 OFFSET ${Math.floor(n / 2)}) AS mid,
            now() - interval '100 days' AS day`,
  );
  const mid = Number(rows[0]!.mid);
  const day = rows[0]!.day;
  const cases: PageCase[] = [
    { name: "newest page, no filter", options: {} },
    { name: "page at the middle (keyset)", options: { beforeSeq: mid } },
    { name: "state = pending", options: { state: "pending" } },
    { name: "state = poisoned", options: { state: "poisoned" } },
    { name: "state = fanned", options: { state: "fanned" } },
    { name: "type supplier.* (10 %)", options: { type: "supplier.*" } },
    { name: "type audit.rare.* (0.02 %)", options: { type: "audit.rare.*" } },
    { name: "subject = one of 100,000", options: { subject: "subject-4242" } },
    { name: "scope = one of 50", options: { scope: "tenant-7" } },
    { name: "one day, 100 days ago", options: { from: day, to: new Date(+day + 86_400_000) } },
  ];
  const out = await timeCases(ctx, cases);
  const slow = cases.filter((c) => (out.find((o) => o.name === c.name)?.ms.median ?? 0) > 50);
  let withProposedIndexes: CaseResult[] = [];
  if (slow.length > 0) {
    for (const sql of PROPOSED_INDEXES) await admin.query(sql);
    await admin.query("ANALYZE events");
    log(`dashboard: again with ${PROPOSED_INDEXES.length} proposed indexes`);
    withProposedIndexes = await timeCases(ctx, slow);
  }
  return { rows: n, cases: out, withProposedIndexes };
}

async function timeCases(ctx: BenchContext, cases: PageCase[]): Promise<CaseResult[]> {
  const pool = ctx.db.newPool(1);
  const client = await pool.connect();
  const out: CaseResult[] = [];
  try {
    for (const c of cases) {
      const { text, values } = await captured({ ...c.options, limit: 50 });
      for (let i = 0; i < 3; i++) await explain(client, text, values);
      const perRep: number[] = [];
      let last: Explained | undefined;
      for (let rep = 1; rep <= ctx.reps; rep++) {
        const samples: number[] = [];
        for (let i = 0; i < SAMPLES; i++) {
          last = await explain(client, text, values);
          samples.push(last.ms);
        }
        perRep.push(median(samples));
      }
      const ms = summarize(perRep);
      log(`dashboard ${c.name}: ${ms.median.toFixed(2)} ms (${last!.returned} rows, ${last!.plan})`);
      out.push({ name: c.name, ms, returned: last!.returned, plan: last!.plan });
    }
  } finally {
    client.release();
    await pool.end();
  }
  return out;
}
