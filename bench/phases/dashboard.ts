// Phase 6: what the dashboard's events page costs in the database with a million
// events. Each case runs browseEvents (src/outbox/browse.ts) against a client that
// runs every statement it sends under EXPLAIN ANALYZE first (a look-up statement,
// when the filter has a wildcard glob or a time bound, then the page), so the
// figure is database time (planning + execution of each), not the network or the
// Worker. The indexes are migration 0006's (docs/adr/0013), on events_browse since
// migration 0010 (docs/adr/0016). The overview's per-minute chart is timed the same way.
import type pg from "pg";
import { browseEvents, eventsPerMinute, type BrowseOptions, type Queryable } from "../../src/outbox/index.ts";
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, settle } from "../support/db.ts";
import { log } from "../support/progress.ts";
import { median, summarize, type Summary } from "../support/stats.ts";

export interface PageCase {
  name: string;
  /** A page of the events page, or (`chart`) the overview's per-minute chart. */
  options: BrowseOptions | "chart";
}

export interface CaseResult {
  name: string;
  /** Median database time of each repetition's samples (ms), all statements of the page. */
  ms: Summary;
  returned: number;
  statements: number;
  /** The scans of each statement, e.g. "Index Scan Backward using events_pkey". */
  plan: string;
}

export interface DashboardResult {
  rows: number;
  cases: CaseResult[];
}

const SAMPLES = 15;

interface PlanNode {
  "Node Type": string;
  "Index Name"?: string;
  "Scan Direction"?: string;
  "Actual Rows": number;
  Plans?: PlanNode[];
}

/** The scan nodes of a plan, deduplicated, in plan order. */
function scans(node: PlanNode, out: Set<string> = new Set()): Set<string> {
  if (
    node["Node Type"].includes("Scan") &&
    !node["Node Type"].startsWith("CTE") &&
    node["Node Type"] !== "WorkTable Scan"
  ) {
    const backward = node["Scan Direction"] === "Backward" ? " Backward" : "";
    out.add(`${node["Node Type"]}${backward}${node["Index Name"] ? ` using ${node["Index Name"]}` : ""}`);
  }
  for (const child of node.Plans ?? []) scans(child, out);
  return out;
}

interface Timed {
  ms: number;
  returned: number;
  statements: number;
  plan: string;
}

/** One page as browseEvents asks for it (or the chart), each statement timed by EXPLAIN ANALYZE and then run for its rows. */
async function timePage(client: pg.PoolClient, options: BrowseOptions | "chart"): Promise<Timed> {
  let ms = 0;
  const plans: string[] = [];
  const timing: Queryable = {
    query: async (text, values = []) => {
      const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
      const [root] = (
        rows[0] as { "QUERY PLAN": { Plan: PlanNode; "Planning Time": number; "Execution Time": number }[] }
      )["QUERY PLAN"];
      ms += root!["Planning Time"] + root!["Execution Time"];
      plans.push([...scans(root!.Plan)].join(" + "));
      return client.query(text, values);
    },
  };
  const returned =
    options === "chart"
      ? (await eventsPerMinute(timing)).length
      : (await browseEvents(timing, options)).events.length;
  return { ms, returned, statements: plans.length, plan: plans.join(" ; ") };
}

/**
 * A million events shaped like a year of use: seq follows created_at (one event
 * every ~30 s over a year), 99.5 % fanned, 0.4 % pending, 0.1 % poisoned; 20
 * types (2 of them rare), 100,000 subjects, 50 scopes, and one subject with 500
 * events spread over the year (an account's, say), too rare for the planner's
 * statistics to know it and too common for a scan of its candidates to be cheap.
 * One row in 100,000 was recorded 150 days before its seq neighbours (a long
 * transaction's), so a time range's rows are not all where seq says they are.
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
              CASE WHEN g % 2000 = 3 THEN 'account-spread' ELSE 'subject-' || (g % 100000) END,
              'tenant-' || (g % 50),
              jsonb_build_object('n', g, 'pad', repeat('x', 150)),
              ts, CASE WHEN state = 'fanned' THEN ts + interval '1 second' END,
              CASE WHEN state = 'fanned' THEN '{"mail":{"messageId":"msg_0"}}'::jsonb END,
              CASE WHEN state = 'poisoned' THEN 5 ELSE 0 END,
              CASE WHEN state = 'poisoned' THEN 'QStash 400: rejected ' || g END,
              CASE WHEN state = 'poisoned' THEN ts + interval '5 minutes' END
         FROM generate_series(${from + 1}::bigint, ${to}::bigint) g,
              LATERAL (SELECT now() - make_interval(secs => (${n} - g) * 30)
                                - CASE WHEN g % 100000 = 50000 THEN interval '150 days' ELSE interval '0' END AS ts,
                              CASE WHEN g % 1000 = 7 THEN 'poisoned'
                                   WHEN g > ${n} - ${Math.round(n * 0.004)} THEN 'pending'
                                   ELSE 'fanned' END AS state) s`,
    );
  }
}

const DAY = 86_400_000;

export async function dashboard(ctx: BenchContext): Promise<DashboardResult> {
  const n = ctx.sizes.history;
  const admin = ctx.db.admin;
  await resetOutbox(admin);
  log(`dashboard: seeding ${n.toLocaleString("en")} events`);
  await seed(admin, n);
  await settle(admin);
  // The seed's keys and (its rows being back-dated and fanned) a year of per-minute
  // counts, analysed as autovacuum would.
  await settle(admin, "events_browse");
  await settle(admin, "outbox_fanned_minutes");
  const { rows } = await admin.query<{ mid: string; now: Date }>(
    `SELECT (SELECT seq FROM events ORDER BY seq LIMIT 1 OFFSET ${Math.floor(n / 2)}) AS mid, now() AS now`,
  );
  const mid = Number(rows[0]!.mid);
  const daysAgo = (d: number) => new Date(+rows[0]!.now - d * DAY);
  const oneDay = { from: daysAgo(100), to: daysAgo(99) };
  // A seq in the middle of that day (seq = g of the seed, one row every 30 s), and
  // the subject of a row in it.
  const inDay = n - Math.round((99.5 * DAY) / 30_000);
  const dayLong = { subject: `subject-${inDay % 100_000}` };
  const cases: PageCase[] = [
    { name: "newest page, no filter", options: {} },
    { name: "page at the middle (keyset)", options: { beforeSeq: mid } },
    { name: "state = pending", options: { state: "pending" } },
    { name: "state = poisoned", options: { state: "poisoned" } },
    { name: "state = fanned", options: { state: "fanned" } },
    { name: "type supplier.* (10 %)", options: { type: "supplier.*" } },
    { name: "type audit.rare.* (0.02 %)", options: { type: "audit.rare.*" } },
    { name: "type *.checked (no prefix, 0.02 %)", options: { type: "*.checked" } },
    { name: "type exact, rare", options: { type: "audit.rare.checked" } },
    { name: "type matching nothing", options: { type: "nothing.*" } },
    { name: "subject = one of 100,000", options: { subject: "subject-4242" } },
    { name: "subject with 500 events spread", options: { subject: "account-spread" } },
    { name: "subject matching nothing", options: { subject: "nobody" } },
    { name: "scope = one of 50", options: { scope: "tenant-7" } },
    { name: "scope matching nothing", options: { scope: "tenant-none" } },
    { name: "scope matching nothing + one day", options: { ...oneDay, scope: "tenant-none" } },
    { name: "one day, 100 days ago", options: oneDay },
    { name: "before 100 days ago (to only)", options: { to: daysAgo(100) } },
    { name: "since 100 days ago (from only)", options: { from: daysAgo(100) } },
    { name: "300 to 100 days ago", options: { from: daysAgo(300), to: daysAgo(100) } },
    { name: "one day + keyset page inside it", options: { ...oneDay, beforeSeq: inDay } },
    { name: "one day + subject", options: { ...oneDay, ...dayLong } },
    {
      name: "300 to 100 days ago + rare type",
      options: { from: daysAgo(300), to: daysAgo(100), type: "audit.rare.*" },
    },
    {
      name: "before 100 days ago + spread subject",
      options: { to: daysAgo(100), subject: "account-spread" },
    },
    { name: "fanned + rare type", options: { state: "fanned", type: "audit.rare.*" } },
    { name: "poisoned + supplier.*", options: { state: "poisoned", type: "supplier.*" } },
    { name: "pending + scope", options: { state: "pending", scope: "tenant-7" } },
    { name: "scope + supplier.* + one day", options: { ...oneDay, scope: "tenant-1", type: "supplier.*" } },
    { name: "rare type, keyset at the middle", options: { type: "audit.rare.*", beforeSeq: mid } },
    { name: "overview: per-minute chart, last hour", options: "chart" },
  ];
  return { rows: n, cases: await timeCases(ctx, cases) };
}

async function timeCases(ctx: BenchContext, cases: PageCase[]): Promise<CaseResult[]> {
  const pool = ctx.db.newPool(1);
  const client = await pool.connect();
  const out: CaseResult[] = [];
  try {
    for (const c of cases) {
      const options = c.options === "chart" ? c.options : { ...c.options, limit: 50 };
      for (let i = 0; i < 3; i++) await timePage(client, options);
      const perRep: number[] = [];
      let last: Timed | undefined;
      for (let rep = 1; rep <= ctx.reps; rep++) {
        const samples: number[] = [];
        for (let i = 0; i < SAMPLES; i++) {
          last = await timePage(client, options);
          samples.push(last.ms);
        }
        perRep.push(median(samples));
      }
      const ms = summarize(perRep);
      log(
        `dashboard ${c.name}: ${ms.median.toFixed(2)} ms [${ms.min.toFixed(2)}–${ms.max.toFixed(2)}] (${last!.returned} rows, ${last!.plan})`,
      );
      out.push({
        name: c.name,
        ms,
        returned: last!.returned,
        statements: last!.statements,
        plan: last!.plan,
      });
    }
  } finally {
    client.release();
    await pool.end();
  }
  return out;
}
