/**
 * `npm run bench:workerd [-- --reps <n>] [--events <n>] [--json <file>] [--baseline <checkout>]`
 *
 * The relay's CPU per 1,000 events in the runtime that bills it (issue 11 item 5:
 * "Workers bill and limit CPU time"). The Worker's own cron sweep drains a seeded
 * backlog in workerd (`GET /__scheduled`), through the Neon driver, the local ws
 * proxy's pooler and the real QStash SDK to the accept-only endpoint; workerd's CPU
 * over the sweep is read from /proc. Beside it, in the same repetition and on the
 * same backlog, the same drain (same code, driver, pooler, endpoint and the
 * reference app's subscriptions) in a warm Node process, through the SDK and with
 * the null publisher: `npm run bench` measures the relay in Node, and Node's
 * `fetch` is JavaScript (undici) where workerd's is the runtime's own.
 *
 * Each variant starts from the same state: outbox emptied, `--events` events of
 * type `corpus.note.updated` (runs of 4 share a subject, so `corpus.index`
 * coalesces: 1.25 jobs per event, as in `npm run bench`), vacuumed and
 * checkpointed. workerd's figure has the CPU of a sweep that finds nothing
 * subtracted (its maintenance, the invocation itself), measured first.
 *
 * `--baseline <checkout>` (a copy of another commit's src, drizzle, wrangler.toml
 * and package.json with node_modules reachable from it, as `npm run bench`'s
 * `--baseline` and `bench:write`'s `--worker` take) runs that commit's Worker too,
 * in a stack of its own over a database migrated with that commit's migrations, in
 * every repetition: issue 11 item 5's now / before, in workerd.
 *
 * Then issue 11 item 4's concurrent relays, in workerd: with 10 ms added to every
 * database round trip (the stack's ws proxy) and 30 ms to every QStash request (a
 * second accept-only endpoint), one cron sweep drains `--relay-events` events, and
 * then four sweeps started at once drain the same backlog again (four invocations
 * in one isolate, as four Node relays share one process in `npm run bench`).
 * The drain ends when no claimable row is left (polled every 25 ms, so a sweep's
 * maintenance afterwards is not counted); 4 sweeps / 1 sweep in events/s, per
 * repetition. `--skip-relays` leaves this part out.
 *
 * Progress goes to stderr, the table to stdout, raw figures to --json.
 */
import { writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { resolve } from "node:path";
import pg from "pg";
import { startWorkerdStack, type WorkerdStack } from "../infra/workerd-stack.ts";
import { migrateDatabase, withDatabase } from "../src/node/postgres.ts";
import { benchCommandLine, wholeOption } from "./support/args.ts";
import { openBenchDatabase, unfanned } from "./support/db.ts";
import type { NeonRelayDrain, NeonRelayInput } from "./support/neon-relay-process.ts";
import { cpuMsSince, cpuSample } from "./support/process-cpu.ts";
import { log, stopOnSignal } from "./support/progress.ts";
import { startAcceptOnlyProcess, startServiceProcess, type AcceptOnlyService } from "./support/service.ts";
import { median, summarize, type Summary } from "./support/stats.ts";
import {
  SWEEP,
  freshSweepBacklog,
  oneAndMany,
  startDelayedWorker,
  sweepsAtOnce,
  type SweepsDrain,
} from "./support/workerd-sweeps.ts";
import { workerBindings } from "./support/worker-bindings.ts";

const USAGE = `usage: npm run bench:workerd [-- options]

The relay's CPU per 1,000 events in workerd, where Workers bill it: the Worker's own
cron sweep drains a seeded backlog, beside the same drain in Node.

  --reps <n>              repetitions (default 3)
  --events <n>            events per drain, at least 1000 (default 20000)
  --relay-events <n>      events for the whole-relay drains, at least 1000 (default 40000)
  --skip-relays           leave out the whole-relay drains
  --baseline <checkout>   an earlier commit's checkout, its Worker run beside this one
  --json <file>           raw figures`;

const { values, reps, events, relayEvents } = benchCommandLine(
  USAGE,
  {
    reps: { type: "string", default: "3" },
    events: { type: "string", default: "20000" },
    json: { type: "string" },
    baseline: { type: "string" },
    "relay-events": { type: "string", default: "40000" },
    "skip-relays": { type: "boolean", default: false },
  },
  (values) => ({
    values,
    reps: wholeOption("reps", values.reps),
    events: wholeOption("events", values.events, 1000),
    relayEvents: wholeOption("relay-events", values["relay-events"], 1000),
  }),
);

/** Variants in the order the first repetition runs them; later repetitions rotate it. */
const ALL_VARIANTS = ["workerd", "nodeQStash", "nodeNull", "workerdBaseline"] as const;
type Variant = (typeof ALL_VARIANTS)[number];
const VARIANTS: readonly Variant[] = values.baseline ? ALL_VARIANTS : ALL_VARIANTS.slice(0, 3);

interface Measured {
  events: number;
  jobs: number;
  ms: number;
  /** CPU of the relay's process (workerd, or the Node relay), ms per 1,000 events. */
  cpuPer1k: number;
  /**
   * CPU of this process (the ws proxy and its pooler, which every variant's database
   * traffic crosses, and wrangler's own Node side) per 1,000 events: about the same
   * for every variant unless something else stands between workerd and the network.
   */
  harnessCpuPer1k: number;
  /** Sweeps it took (workerd only: one unless a sweep's budget ran out). */
  sweeps?: number;
}

const db = await openBenchDatabase();
let qstash: AcceptOnlyService | undefined;
let stack: WorkerdStack | undefined;
/** `--baseline`: the other commit's Worker, its database and that database's admin pool. */
let base: { stack?: WorkerdStack; admin: pg.Pool; url: string; name: string } | undefined;
let node: Awaited<ReturnType<typeof startServiceProcess<Record<string, never>>>> | undefined;
const stopOnce = async () => {
  await node?.close();
  await stack?.close();
  await base?.stack?.close();
  await base?.admin.end().catch(() => undefined);
  if (base) await db.admin.query(`DROP DATABASE IF EXISTS ${base.name} WITH (FORCE)`).catch(() => undefined);
  await qstash?.close();
  await db.close();
};
const stop = stopOnSignal(stopOnce);

/** Nothing left to fan out, and every job reached the endpoint: else the figure is not a drain's. */
async function checkDrained(expectJobs: number | undefined, admin: pg.Pool = db.admin): Promise<void> {
  const left = await unfanned(admin);
  if (left !== 0) throw new Error(`${left} events left unfanned`);
  if (expectJobs !== undefined) {
    const stats = await qstash!.stats();
    if (stats.messages !== expectJobs)
      throw new Error(`endpoint took ${stats.messages} messages, expected ${expectJobs}`);
  }
}

async function fresh(n: number, admin: pg.Pool = db.admin): Promise<void> {
  await freshSweepBacklog(admin, n);
  await qstash!.reset();
}

/**
 * Cron sweeps until the backlog is drained: workerd's CPU per 1,000 events, the
 * empty sweep's cost taken off each sweep.
 */
async function drainBySweeps(s: WorkerdStack, admin: pg.Pool, emptyCpuMs: number): Promise<Measured> {
  let cpuMs = 0;
  let ms = 0;
  let sweeps = 0;
  const harness = process.cpuUsage();
  // One sweep drains 20,000 events well inside its 25 s budget here; a slower
  // machine may need another, each paying the empty sweep's cost once.
  while ((await unfanned(admin)) > 0) {
    if (sweeps === 5) throw new Error("5 sweeps did not drain the backlog");
    const one = await sweep(s);
    cpuMs += one.cpuMs - emptyCpuMs;
    ms += one.ms;
    sweeps++;
  }
  const harnessMs = cpuMsSince(harness);
  await checkDrained(undefined, admin);
  // Compared with the Node drain's own count of the same backlog.
  const jobs = (await qstash!.stats()).messages;
  return {
    events,
    jobs,
    ms,
    cpuPer1k: (cpuMs / events) * 1000,
    harnessCpuPer1k: (harnessMs / events) * 1000,
    sweeps,
  };
}

async function emptySweepCpu(s: WorkerdStack, admin: pg.Pool): Promise<Summary> {
  await fresh(1_000, admin);
  await sweep(s);
  const empty: number[] = [];
  for (let i = 0; i < 5; i++) empty.push((await sweep(s)).cpuMs);
  return summarize(empty);
}

/** One cron sweep, awaited, and workerd's CPU over it (after its `waitUntil` work settles). */
async function sweep(s: WorkerdStack): Promise<{ cpuMs: number; ms: number }> {
  const before = cpuSample();
  const started = performance.now();
  const res = await s.fetch(SWEEP);
  const text = await res.text();
  const ms = performance.now() - started;
  if (!res.ok) throw new Error(`sweep answered ${res.status}: ${text}`);
  // The pool ends in waitUntil; give it a moment so its CPU is counted here, not in the next sweep.
  await new Promise((r) => setTimeout(r, 300));
  return { cpuMs: cpuSample().workerdMs - before.workerdMs, ms };
}

/** Issue 11 item 4's delays: per database round trip and per QStash request. */
const DATABASE_DELAY_MS = 10;
const QSTASH_DELAY_MS = 30;
/** Sweeps started at once in the concurrent drain. */
const CONCURRENT_SWEEPS = 4;

interface RelaysResult {
  events: number;
  delays: { databaseMs: number; qstashMs: number };
  repetitions: { one: SweepsDrain; four: SweepsDrain; load: [number, number] }[];
  /** Per repetition: events/s with 4 sweeps at once / with one. */
  fourOverOne: Summary;
  eventsPerSecond: { one: Summary; four: Summary };
  workerdCpuPer1k: { one: Summary; four: Summary };
}

async function concurrentSweeps(): Promise<RelaysResult> {
  const worker = await startDelayedWorker({
    databaseUrl: db.url,
    databaseMs: DATABASE_DELAY_MS,
    qstashMs: QSTASH_DELAY_MS,
  });
  try {
    log(
      `concurrent sweeps: Worker at ${worker.stack.url}, +${DATABASE_DELAY_MS} ms per round trip, +${QSTASH_DELAY_MS} ms per request`,
    );
    // Warm the delayed stack's Worker, uncounted.
    await sweepsAtOnce(worker, db.admin, relayEvents, CONCURRENT_SWEEPS);
    const repetitions: RelaysResult["repetitions"] = [];
    for (let rep = 1; rep <= reps; rep++) {
      const load0 = loadavg()[0]!;
      const { one, many: four } = await oneAndMany(worker, db.admin, relayEvents, CONCURRENT_SWEEPS, rep);
      repetitions.push({ one, four, load: [load0, loadavg()[0]!] });
      log(
        `rep ${rep}/${reps} sweeps: 1 at ${Math.round(one.eventsPerSecond)} events/s, ` +
          `${CONCURRENT_SWEEPS} at ${Math.round(four.eventsPerSecond)} (${(four.eventsPerSecond / one.eventsPerSecond).toFixed(2)}×)`,
      );
    }
    const pick = (f: (r: RelaysResult["repetitions"][number]) => number) => summarize(repetitions.map(f));
    return {
      events: relayEvents,
      delays: { databaseMs: DATABASE_DELAY_MS, qstashMs: QSTASH_DELAY_MS },
      repetitions,
      fourOverOne: pick((r) => r.four.eventsPerSecond / r.one.eventsPerSecond),
      eventsPerSecond: { one: pick((r) => r.one.eventsPerSecond), four: pick((r) => r.four.eventsPerSecond) },
      workerdCpuPer1k: { one: pick((r) => r.one.workerdCpuPer1k), four: pick((r) => r.four.workerdCpuPer1k) },
    };
  } finally {
    await worker.close();
  }
}

const result: {
  events: number;
  emptySweepCpuMs: Summary;
  /** `--baseline`'s empty sweep. */
  baselineEmptySweepCpuMs?: Summary;
  repetitions: (Record<Variant, Measured> & { load: [number, number] })[];
  cpuPer1k: Record<Variant, Summary>;
  workerdOverNodeQStash: Summary;
  nodeQStashOverNull: Summary;
  /** `--baseline`: workerd now / the baseline's Worker, per repetition. */
  workerdOverBaseline?: Summary;
  /** Concurrent sweeps under the production-shaped delays (unless --skip-relays). */
  relays?: RelaysResult;
} = {
  events,
  emptySweepCpuMs: summarize([0]),
  repetitions: [],
  cpuPer1k: {} as Record<Variant, Summary>,
  workerdOverNodeQStash: summarize([0]),
  nodeQStashOverNull: summarize([0]),
};

try {
  qstash = await startAcceptOnlyProcess(0);
  stack = await startWorkerdStack({
    databaseUrl: db.url,
    bindings: workerBindings(),
    // The Worker publishes to the accept-only endpoint: the relay and the SDK, not a stand-in's store.
    overrides: { QSTASH_URL: qstash.url, QSTASH_TOKEN: qstash.token },
  });
  if (values.baseline) {
    const checkout = resolve(values.baseline);
    const name = `edge_outbox_bench_${process.pid}_base`;
    await db.admin.query(`DROP DATABASE IF EXISTS ${name}`);
    await db.admin.query(`CREATE DATABASE ${name}`);
    const url = withDatabase(db.url, name);
    const admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on("error", () => undefined);
    base = { admin, url, name };
    await migrateDatabase(url, resolve(checkout, "drizzle"));
    base.stack = await startWorkerdStack({
      databaseUrl: base.url,
      config: resolve(checkout, "wrangler.toml"),
      bindings: workerBindings(),
      overrides: { QSTASH_URL: qstash.url, QSTASH_TOKEN: qstash.token },
    });
    log(`baseline Worker (${checkout}) at ${base.stack.url}`);
  }
  const nodeInput: NeonRelayInput = {
    databaseUrl: stack.env.DATABASE_URL ?? db.url,
    proxyAddress: stack.proxy.address,
    qstash: { url: qstash.url, token: qstash.token },
    publicUrl: stack.url,
  };
  node = await startServiceProcess<Record<string, never>>("./neon-relay-process.ts", [
    JSON.stringify(nodeInput),
  ]);
  log(`Worker at ${stack.url}, database ${db.server}, ${events} events per drain, ${reps} repetitions`);

  // Warm both relays (JIT, the SDK's first request) on a small backlog, uncounted.
  for (const variant of VARIANTS) {
    const admin = variant === "workerdBaseline" ? base!.admin : db.admin;
    await fresh(2_000, admin);
    if (variant === "workerd") await sweep(stack);
    else if (variant === "workerdBaseline") await sweep(base!.stack!);
    else await node.call<NeonRelayDrain>(variant === "nodeQStash" ? "qstash" : "null");
    await checkDrained(undefined, admin);
  }
  // What a sweep costs with nothing to drain: maintenance and the invocation itself.
  result.emptySweepCpuMs = await emptySweepCpu(stack, db.admin);
  const e = result.emptySweepCpuMs;
  log(`empty sweep: ${e.median} ms of workerd CPU [${e.min}–${e.max}]`);
  if (base) {
    result.baselineEmptySweepCpuMs = await emptySweepCpu(base.stack!, base.admin);
    const b = result.baselineEmptySweepCpuMs;
    log(`baseline's empty sweep: ${b.median} ms of workerd CPU [${b.min}–${b.max}]`);
  }

  for (let rep = 0; rep < reps; rep++) {
    const load0 = loadavg()[0]!;
    const order = VARIANTS.map((_, i) => VARIANTS[(i + rep) % VARIANTS.length]!);
    const measured = {} as Record<Variant, Measured>;
    for (const variant of order) {
      if (variant === "workerdBaseline") {
        await fresh(events, base!.admin);
        measured.workerdBaseline = await drainBySweeps(
          base!.stack!,
          base!.admin,
          result.baselineEmptySweepCpuMs!.median,
        );
      } else if (variant === "workerd") {
        await fresh(events);
        measured.workerd = await drainBySweeps(stack, db.admin, result.emptySweepCpuMs.median);
      } else {
        await fresh(events);
        const harness = process.cpuUsage();
        const d = await node.call<NeonRelayDrain>(variant === "nodeQStash" ? "qstash" : "null");
        const harnessMs = cpuMsSince(harness);
        if (d.events !== events) throw new Error(`${variant} fanned ${d.events} of ${events}`);
        await checkDrained(variant === "nodeQStash" ? d.jobs : undefined);
        measured[variant] = {
          events: d.events,
          jobs: d.jobs,
          ms: d.ms,
          cpuPer1k: (d.cpuMs / d.events) * 1000,
          harnessCpuPer1k: (harnessMs / d.events) * 1000,
        };
      }
      const m = measured[variant];
      log(
        `rep ${rep + 1}/${reps} ${variant}: ${m.cpuPer1k.toFixed(1)} ms CPU per 1,000 events, ` +
          `${Math.round((m.events / m.ms) * 1000)} events/s, ${m.jobs} jobs; ` +
          `harness ${m.harnessCpuPer1k.toFixed(1)} ms per 1,000`,
      );
    }
    // The same backlog makes the same passes, so the same jobs, whichever relay drained it.
    for (const v of ["workerd", "workerdBaseline"] as const) {
      if (measured[v] && measured[v].jobs !== measured.nodeQStash.jobs) {
        throw new Error(`${v} published ${measured[v].jobs} jobs, Node ${measured.nodeQStash.jobs}`);
      }
    }
    result.repetitions.push({ ...measured, load: [load0, loadavg()[0]!] });
  }

  const per = (v: Variant) => summarize(result.repetitions.map((r) => r[v].cpuPer1k));
  for (const v of VARIANTS) result.cpuPer1k[v] = per(v);
  result.workerdOverNodeQStash = summarize(
    result.repetitions.map((r) => r.workerd.cpuPer1k / r.nodeQStash.cpuPer1k),
  );
  result.nodeQStashOverNull = summarize(
    result.repetitions.map((r) => r.nodeQStash.cpuPer1k / r.nodeNull.cpuPer1k),
  );
  if (base) {
    result.workerdOverBaseline = summarize(
      result.repetitions.map((r) => r.workerd.cpuPer1k / r.workerdBaseline.cpuPer1k),
    );
  }

  const f = (s: Summary, d = 1) => `${s.median.toFixed(d)} [${s.min.toFixed(d)}–${s.max.toFixed(d)}]`;
  const loads = result.repetitions.flatMap((r) => r.load);
  console.log(
    [
      `relay CPU per 1,000 events (${events} events per drain, ${reps} repetitions, load ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}; median [min–max])`,
      `  workerd, cron sweep via the SDK   ${f(result.cpuPer1k.workerd)} ms   (empty sweep ${f(result.emptySweepCpuMs, 0)} ms, subtracted)`,
      `  Node, same drain via the SDK      ${f(result.cpuPer1k.nodeQStash)} ms`,
      `  Node, same drain, null publisher  ${f(result.cpuPer1k.nodeNull)} ms`,
      `  workerd / Node via the SDK        ${f(result.workerdOverNodeQStash, 2)}`,
      `  Node: SDK / null publisher        ${f(result.nodeQStashOverNull, 2)}`,
      `  per pass of 200 events in workerd ${(median(result.repetitions.map((r) => r.workerd.cpuPer1k)) / 5).toFixed(1)} ms`,
      ...(base
        ? [
            `  workerd, the baseline's Worker    ${f(result.cpuPer1k.workerdBaseline)} ms   (empty sweep ${f(result.baselineEmptySweepCpuMs!, 0)} ms, subtracted)`,
            `  workerd now / baseline            ${f(result.workerdOverBaseline!, 2)}   (issue 11 item 5 asks ≤ 0.5 of a20dd97's)`,
          ]
        : []),
    ].join("\n"),
  );
  if (!values["skip-relays"]) {
    const r = (result.relays = await concurrentSweeps());
    console.log(
      [
        `concurrent sweeps in workerd (${r.events} events, +${r.delays.databaseMs} ms per round trip, +${r.delays.qstashMs} ms per QStash request)`,
        `  1 sweep, events/s                 ${f(r.eventsPerSecond.one, 0)}   (workerd CPU per 1,000 events ${f(r.workerdCpuPer1k.one)} ms)`,
        `  ${CONCURRENT_SWEEPS} sweeps at once, events/s        ${f(r.eventsPerSecond.four, 0)}   (workerd CPU per 1,000 events ${f(r.workerdCpuPer1k.four)} ms)`,
        `  ${CONCURRENT_SWEEPS} / 1                             ${f(r.fourOverOne, 2)}   (issue 11 item 4 asks ≥ 3.5; npm run bench measures it too)`,
      ].join("\n"),
    );
  }
  if (values.json) await writeFile(values.json, JSON.stringify(result, null, 2));
} finally {
  await stop();
}
