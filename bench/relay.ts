/**
 * `npm run bench [-- --quick] [--json <file>] [--reps <n>] [--only <phase,...>] [--baseline <checkout>] [--variants <v,...>]
 *   [--db-delay <ms>] [--qstash-delay <ms>] [--far-edge-rtt <ms>] [--near-db-rtt <ms>]`
 *
 * Measures the relay against the ceiling Postgres sets on this machine, in one run
 * (issue 5). Progress goes to stderr, the table to stdout, raw figures to --json.
 * Postgres: DATABASE_URL's server when set (a database edge_outbox_bench_<pid> is
 * created, migrated and dropped), otherwise an embedded one.
 */
import { writeFile } from "node:fs/promises";
import { arch, cpus, loadavg, platform, totalmem } from "node:os";
import { resolve } from "node:path";
import { concurrency } from "./phases/concurrency.ts";
import { dashboard } from "./phases/dashboard.ts";
import { history } from "./phases/history.ts";
import { latency } from "./phases/latency.ts";
import { placement } from "./phases/placement.ts";
import { production } from "./phases/production.ts";
import { roundTrips } from "./phases/round-trips.ts";
import { throughput } from "./phases/throughput.ts";
import { writes } from "./phases/writes.ts";
import { table, targets, type Results } from "./report.ts";
import { BenchUsageError, benchCommandLine, msOption, wholeOption } from "./support/args.ts";
import { FULL, QUICK, type BenchContext } from "./support/context.ts";
import { openBenchDatabase } from "./support/db.ts";
import { placementOptions, placementRtts } from "./support/placement.ts";
import { log, stopOnSignal } from "./support/progress.ts";
import { startDevServerProcess } from "./support/qstash.ts";
import { startAcceptOnlyProcess } from "./support/service.ts";

const PHASES = [
  "throughput",
  "concurrency",
  "history",
  "round-trips",
  "latency",
  "dashboard",
  "production",
  "writes",
  "placement",
] as const;
type Phase = (typeof PHASES)[number];

const USAGE = `usage: npm run bench [-- options]

Measures the relay against the ceiling Postgres sets on this machine, in one run.
Postgres: DATABASE_URL's server when set, otherwise an embedded one.

  --quick                 small sizes, for a first look
  --reps <n>              repetitions (default 3)
  --only <phase,...>      ${PHASES.join(", ")}
  --json <file>           raw figures, every target with whether it was met
  --baseline <checkout>   an earlier commit's checkout, run beside this one
  --variants <v,...>      only these throughput drains (e.g. ceiling,bareCeiling)
  --db-delay <ms>         production-shaped phase: per database round trip (default 10)
  --qstash-delay <ms>     and per QStash request (default 30)
  --far-edge-rtt <ms>     placement phase: far from the database (default 80)
  --near-db-rtt <ms>      and next to it (default 5)`;

const { values, delays, rtts, reps, only } = benchCommandLine(
  USAGE,
  {
    quick: { type: "boolean", default: false },
    json: { type: "string" },
    reps: { type: "string", default: "3" },
    only: { type: "string" },
    baseline: { type: "string" },
    variants: { type: "string" },
    // The production-shaped phase's added latencies (issue 11 item 4).
    "db-delay": { type: "string", default: "10" },
    "qstash-delay": { type: "string", default: "30" },
    // The placement phase's database round-trip times (issue 11 item 8); QStash's is --qstash-delay.
    ...placementOptions,
  },
  (values) => {
    const only = values.only?.split(",") ?? [...PHASES];
    for (const p of only) {
      if (!PHASES.includes(p as Phase)) {
        throw new BenchUsageError(`unknown phase ${p}; phases: ${PHASES.join(", ")}`);
      }
    }
    return {
      values,
      delays: {
        databaseMs: msOption("db-delay", values["db-delay"]),
        qstashMs: msOption("qstash-delay", values["qstash-delay"]),
      },
      rtts: placementRtts(values),
      reps: wholeOption("reps", values.reps),
      only,
    };
  },
);
const runs = (p: Phase) => only.includes(p);

const startedAt = new Date();
// The machine is shared: its load (1, 5, 15 min) at both ends says how far to trust absolute figures.
const loadAtStart = loadavg();
const started = performance.now();
const sizes = values.quick ? QUICK : FULL;
const db = await openBenchDatabase();
const qstash = await startDevServerProcess();
const acceptOnly = await startAcceptOnlyProcess();
// `--baseline <dir>`: a checkout of an earlier commit (with node_modules reachable
// from it); its relay runs beside this one's in the throughput phase.
const baselineOutbox = values.baseline ? resolve(values.baseline, "src/outbox/index.ts") : undefined;
const ctx: BenchContext = {
  db,
  qstash,
  acceptOnly,
  delays,
  rtts,
  sizes,
  reps,
  batchSize: 200,
  ...(baselineOutbox ? { baselineOutbox } : {}),
  // `--variants ceiling,bareCeiling`: only these throughput drains, for a short run.
  ...(values.variants ? { variants: values.variants.split(",") } : {}),
};
log(`database ${db.server}, ${values.quick ? "quick" : "full"} sizes, ${reps} repetitions`);
const { rows } = await db.admin.query<{ version: string; autovacuum: string }>(
  `SELECT current_setting('server_version') AS version, current_setting('autovacuum') AS autovacuum`,
);
// The long-drain figures depend on it: with autovacuum off, nothing removes the
// dead entries at the head of the claim index during a drain.
const autovacuum = rows[0]?.autovacuum ?? "unknown";

// Ctrl-C mid-run: drop the benchmark's database rather than leave it on a shared server.
const stop = stopOnSignal(async () => {
  await Promise.allSettled([qstash.close(), acceptOnly.close(), db.close()]);
}, 10_000);

const results: Results = {};
try {
  if (runs("throughput")) results.throughput = await throughput(ctx);
  if (runs("concurrency")) results.concurrency = await concurrency(ctx);
  if (runs("history")) results.history = await history(ctx);
  if (runs("round-trips")) results.roundTrips = await roundTrips(ctx);
  if (runs("latency")) results.latency = await latency(ctx);
  if (runs("dashboard")) results.dashboard = await dashboard(ctx);
  if (runs("production")) results.production = await production(ctx);
  if (runs("writes")) results.writes = await writes(ctx);
  if (runs("placement")) results.placement = await placement(ctx);
} finally {
  await stop();
}

const seconds = (performance.now() - started) / 1000;
const loadAtEnd = loadavg();
const load = (l: number[]) => l.map((x) => x.toFixed(1)).join(" ");
const machine = `${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GB, ${platform()} ${arch()}`;
const note =
  `${values.quick ? "QUICK run (smaller sizes): not comparable with a full run. " : ""}` +
  `Postgres ${rows[0]?.version} (${db.server}, autovacuum ${autovacuum}), Node ${process.version}, ${machine}; ` +
  `run took ${seconds.toFixed(0)} s; load average (1/5/15 min) ${load(loadAtStart)} at start, ${load(loadAtEnd)} at end.`;
process.stdout.write(`${table(results, { reps, note })}\n`);

if (values.json) {
  const json = {
    startedAt: startedAt.toISOString(),
    seconds,
    quick: values.quick,
    reps,
    sizes,
    baseline: values.baseline ?? null,
    batchSize: ctx.batchSize,
    postgres: rows[0]?.version,
    autovacuum,
    database: db.server,
    node: process.version,
    machine,
    loadAverage: { start: loadAtStart, end: loadAtEnd },
    qstash:
      "infra/qstash-dev in its own process, delivery paused; infra/qstash-accept-only in its own process",
    delays,
    placementRtts: rtts,
    targets: targets(results),
    results,
  };
  await writeFile(values.json, `${JSON.stringify(json, null, 2)}\n`);
  log(`raw figures written to ${values.json}`);
}
