// Phase 11 (issue 11 item 4): the relay as the Worker runs it. @neondatabase/serverless
// over WebSockets through infra/ws-proxy.ts, which holds every database reply
// `databaseMs` (the Worker's distance to its Neon region), and @upstash/qstash to
// the accept-only endpoint, which holds every request `qstashMs`. Both stand-ins run
// in their own processes, so their timers do not wait for the relay's JavaScript.
// A pass's floor is what those delays alone cost it: 2 database round trips and
// 1 QStash request (its batch chunks go out together). Item 4's concurrent relays are
// also run as a deployment runs them: the Worker's own cron sweeps in workerd, one and
// four at once, behind the same delays (bench/support/workerd-sweeps.ts).
import { Pool } from "@neondatabase/serverless";
import {
  createQStashPublisher,
  openPasses,
  runPass,
  type Job,
  type PassResult,
  type Publisher,
} from "../../src/outbox/index.ts";
import { configureNeonForWsProxy, startWsProxy, takesPipelinedConnect } from "../../infra/ws-proxy.ts";
import type { BenchContext } from "../support/context.ts";
import { processCpuMs } from "../support/process-cpu.ts";
import { incompleteFanouts, resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { log } from "../support/progress.ts";
import {
  startAcceptOnlyProcess,
  startWsProxyProcess,
  type AcceptOnlyService,
  type WsProxyService,
} from "../support/service.ts";
import { summarize, type Summary } from "../support/stats.ts";
import { LABEL, PUBLIC_URL, benchSubscriptions, drainTogether } from "../support/subscriptions.ts";
import { oneAndMany, startDelayedWorker, sweepsAtOnce, type SweepsDrain } from "../support/workerd-sweeps.ts";
import { countingPublisher } from "./concurrency.ts";
import { commitToPublished, summarizeLatency, type LatencyResult, type LatencyRun } from "./latency.ts";

/** Relays draining one backlog together, each on its own connection, against one. */
export const PRODUCTION_RELAY_COUNTS = [1, 4] as const;

/** One pass of the instrumented drain, timed and counted from outside. */
export interface ProductionPass {
  ms: number;
  /** Of which waiting for the publish (all of the pass's chunks). */
  publishMs: number;
  claimed: number;
  /** Database round trips, as the proxy counted them. */
  roundTrips: number;
  /** Batch requests the QStash endpoint answered. */
  qstashRequests: number;
}

export interface ProductionDrain {
  relays: number;
  ms: number;
  events: number;
  passes: number;
  roundTrips: number;
  qstashRequests: number;
  /** Deduplication ids published twice, and rows whose fanout misses a subscription: must be 0. */
  duplicates: number;
  incompleteFanout: number;
  /**
   * CPU time of this process (all its relays, user + system) over the drain: near
   * the wall time means one Node thread was the limit, which Workers would not share.
   */
  cpuMs: number;
  /**
   * Where a pass's work went, CPU ms per pass by process over the drain: the relay
   * (this process), the Postgres backends of its connections, the ws proxy and the
   * accept-only endpoint. Undefined where /proc does not show the process (a
   * Postgres on another machine).
   */
  cpuPerPassMs: CpuPerPass;
}

export interface CpuPerPass {
  relay: number;
  postgres?: number;
  proxy?: number;
  qstash?: number;
}

export interface ProductionResult {
  delays: { databaseMs: number; qstashMs: number };
  /** 2 × databaseMs + qstashMs: a pass's floor as issue 11 set it (claim, commit, publish). */
  floorMs: number;
  /**
   * databaseMs + qstashMs: the floor of a drain's pass after the first, whose claim
   * travelled with the previous pass's commit (ADR 0022).
   */
  drainFloorMs: number;
  /** Whether this Postgres took the driver's pipelined connect (password auth, as Neon). */
  pipelinedConnect: boolean;
  /** Round trips before a fresh connection's first query could be sent. */
  connectRoundTrips: number;
  /** Connection set-up and a first `SELECT 1`, at the database delay. */
  connectMs: number;
  /** Per repetition: median time of a full pass (one relay, passes as drain() runs them). */
  passMs: Summary;
  /** Per repetition: median publish wait inside a full pass. */
  publishMs: Summary;
  /** Per repetition: median pass / floor. */
  passOverFloor: Summary;
  /** Per repetition: median pass / drainFloorMs, what is left above a drain pass's own floor. */
  passOverDrainFloor: Summary;
  /**
   * The same backlog in passes run alone (runPass: claim and commit each their own
   * round trip), as every pass ran before ADR 0022: per repetition, median full pass
   * and its ratio to floorMs.
   */
  singlePass: { passMs: Summary; passOverFloor: Summary; roundTripsPerPass: { min: number; max: number } };
  /**
   * The same passes with no delay added (undelayed proxy and endpoint): this
   * machine's own work in a pass (Postgres, the driver, planning, the SDK, the
   * stand-ins), which a delayed pass adds to its floor.
   */
  undelayedPassMs: Summary;
  /**
   * Database round trips of every full pass over all repetitions (median, min and
   * max: in a drain the first pass claims on its own, 2, and every later one 1), and
   * of the final empty pass.
   */
  roundTripsPerPass: { median: number; min: number; max: number; empty: number };
  /** QStash requests of every full pass (min and max). */
  qstashRequestsPerPass: { min: number; max: number };
  /** Events per second with 1 and with 4 relays. */
  eventsPerSecond: Record<number, Summary>;
  /**
   * CPU ms per pass by process with 1 and with 4 relays (ProductionDrain.cpuPerPassMs,
   * per repetition): whether a pass's own work is the relay's JavaScript or the
   * database's, and what 4 relays ask of the machine's cores.
   */
  cpuPerPassMs: Record<number, Record<keyof CpuPerPass, Summary | undefined>>;
  duplicates: number;
  incompleteFanout: number;
  /** Commit → published, kicks over the Neon driver, at these delays. */
  latency: LatencyResult;
  /**
   * The same concurrency in workerd, as a deployment runs it: the Worker's cron sweep
   * drains `events` alone, then PRODUCTION_RELAY_COUNTS' larger count of sweeps
   * started at once drains the same backlog, behind the same delays; events/s of
   * each and their ratio per repetition, and workerd's CPU per 1,000 events.
   */
  workerdSweeps: {
    events: number;
    eventsPerSecond: Record<number, Summary>;
    manyOverOne: Summary;
    workerdCpuPer1k: Record<number, Summary>;
  };
  raw: {
    workerdSweeps: { one: SweepsDrain; many: SweepsDrain }[];
    passes: ProductionPass[][];
    undelayedPasses: ProductionPass[][];
    singlePasses: ProductionPass[][];
    drains: ProductionDrain[];
  };
}

const newNeonPool = (url: string, max: number) => {
  const pool = new Pool({ connectionString: url, max });
  pool.on("error", () => undefined);
  return pool;
};

/** A connected pool: connection set-up is paid once per invocation, not per pass. */
async function connectedPool(url: string, max = 1): Promise<Pool> {
  const pool = newNeonPool(url, max);
  await Promise.all(Array.from({ length: max }, () => pool.query("SELECT 1")));
  return pool;
}

/** The backend process of a connected one-connection pool, for its CPU time. */
async function backendPid(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
  return rows[0]!.pid;
}

/** CPU ms of several processes together so far; undefined if any is not visible. */
function cpuOfProcesses(pids: number[]): number | undefined {
  let sum = 0;
  for (const pid of pids) {
    const ms = processCpuMs(pid);
    if (ms === undefined) return undefined;
    sum += ms;
  }
  return sum;
}

const publisherFor = (qstash: AcceptOnlyService) =>
  createQStashPublisher({ baseUrl: qstash.url, token: qstash.token, publicUrl: PUBLIC_URL, label: LABEL });

async function freshBacklog(ctx: BenchContext, events = ctx.sizes.productionBacklog): Promise<void> {
  await resetOutbox(ctx.db.admin);
  await seedBacklog(ctx.db.admin, events);
  await settle(ctx.db.admin);
}

/**
 * Whether the database takes the driver's pipelined connect (password auth, as
 * Neon); a local server with trust or SCRAM authentication refuses it and connects
 * the slow way. Only connection set-up differs: a pass runs on a connection
 * already open. Asked through an undelayed proxy: through a delayed one, a server
 * that refuses the early password closed the connection before its held error
 * reply was passed on, and the driver waited forever (infra/ws-proxy.ts, noted in
 * the docs).
 */
export async function pipelinedConnectOf(databaseUrl: string): Promise<boolean> {
  const undelayed = await startWsProxy();
  return takesPipelinedConnect(undelayed, databaseUrl).finally(() => undelayed.close());
}

/**
 * A fresh connection and its first `SELECT 1` through `proxy` (which the Neon
 * driver must already be pointed at): what every Worker invocation pays before
 * its first statement, since it cannot keep a connection from the last one.
 */
export async function measureConnect(
  proxy: WsProxyService,
  databaseUrl: string,
): Promise<{ ms: number; roundTrips: number }> {
  const before = await proxy.stats();
  const started = performance.now();
  const probe = newNeonPool(databaseUrl, 1);
  let ms: number;
  try {
    await probe.query("SELECT 1");
    // Before closing: the Terminate waits for nothing, as a Worker does not.
    ms = performance.now() - started;
  } finally {
    await probe.end();
  }
  // The SELECT's own round trip is not set-up.
  return { ms, roundTrips: (await proxy.stats()).roundTrips - before.roundTrips - 1 };
}

/** Passes that claimed a whole batch: the last, partial and empty ones time something else. */
export const fullPasses = (ctx: BenchContext, passes: ProductionPass[]) =>
  passes.filter((p) => p.claimed === ctx.batchSize);

/**
 * How a pass is run: `drain` as drain() runs its passes, one connection, each pass's
 * commit carrying the next pass's claim (ADR 0022), so a pass after the first costs
 * one database round trip; `single` as runPass() runs a pass alone, claim and
 * commit each a round trip of their own (the shape of every pass before ADR 0022,
 * and still of a lone pass: the CLI's `relay once`).
 */
export type PassShape = "drain" | "single";

/**
 * One relay, pass by pass, with the proxy's and the endpoint's counters read
 * between passes, over a fresh backlog of `events`. A pass's time is its own: in
 * the `drain` shape the counters are read while the next pass's claim is held,
 * outside any pass's clock.
 */
export async function instrumentedDrain(
  ctx: BenchContext,
  proxy: WsProxyService,
  qstash: AcceptOnlyService,
  events = ctx.sizes.productionBacklog,
  shape: PassShape = "drain",
): Promise<ProductionPass[]> {
  await freshBacklog(ctx, events);
  const pool = await connectedPool(ctx.db.url);
  const inner = publisherFor(qstash);
  let publishMs = 0;
  const publisher: Publisher = {
    async publish(jobs: Job[], signal) {
      const started = performance.now();
      try {
        return await inner.publish(jobs, signal);
      } finally {
        publishMs += performance.now() - started;
      }
    },
  };
  const options = { pool, publisher, subscriptions: benchSubscriptions, batchSize: ctx.batchSize };
  const session = shape === "drain" ? await openPasses(options) : undefined;
  const run = (): Promise<PassResult> => (session ? session.run(() => true) : runPass(options));
  const passes: ProductionPass[] = [];
  try {
    for (;;) {
      const [db0, q0] = await Promise.all([proxy.stats(), qstash.stats()]);
      publishMs = 0;
      const started = performance.now();
      const pass = await run();
      const ms = performance.now() - started;
      const [db1, q1] = await Promise.all([proxy.stats(), qstash.stats()]);
      if (pass.error) throw new Error(`production pass failed: ${pass.error}`);
      passes.push({
        ms,
        publishMs,
        claimed: pass.claimed,
        roundTrips: db1.roundTrips - db0.roundTrips,
        qstashRequests: q1.requests - q0.requests,
      });
      if (pass.claimed === 0) break;
    }
  } finally {
    await session?.close();
    await pool.end();
  }
  return passes;
}

/** `relays` relays drain one backlog together through the same stand-ins, each its own connection. */
async function concurrentDrain(
  ctx: BenchContext,
  relays: number,
  proxy: WsProxyService,
  qstash: AcceptOnlyService,
): Promise<ProductionDrain> {
  await freshBacklog(ctx);
  const pools = await Promise.all(Array.from({ length: relays }, () => connectedPool(ctx.db.url)));
  const backends = await Promise.all(pools.map(backendPid));
  const { publisher, duplicates } = countingPublisher(publisherFor(qstash));
  const [db0, q0] = await Promise.all([proxy.stats(), qstash.stats()]);
  // Each process's CPU, read from /proc (10 ms ticks; a drain is hundreds of passes).
  const others = () => [cpuOfProcesses(backends), processCpuMs(proxy.pid), processCpuMs(qstash.pid)];
  const others0 = others();
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  const results = await drainTogether(pools, publisher, ctx.batchSize);
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpu0);
  const others1 = others();
  const [db1, q1] = await Promise.all([proxy.stats(), qstash.stats()]);
  await Promise.all(pools.map((p) => p.end()));
  const events = results.reduce((sum, r) => sum + r.fanned, 0);
  const passes = results.reduce((sum, r) => sum + r.passes, 0);
  const perPass = (i: number) => {
    const [a, b] = [others0[i], others1[i]];
    return a === undefined || b === undefined ? undefined : (b - a) / passes;
  };
  const [postgres, proxyCpu, qstashCpu] = [0, 1, 2].map(perPass);
  const left = await unfanned(ctx.db.admin);
  if (events !== ctx.sizes.productionBacklog || left !== 0) {
    throw new Error(
      `production: ${relays} relays fanned ${events} of ${ctx.sizes.productionBacklog}, ${left} left`,
    );
  }
  return {
    relays,
    ms,
    events,
    passes,
    roundTrips: db1.roundTrips - db0.roundTrips,
    qstashRequests: q1.requests - q0.requests,
    duplicates: duplicates(),
    incompleteFanout: await incompleteFanouts(ctx.db.admin),
    cpuMs: (cpu.user + cpu.system) / 1000,
    cpuPerPassMs: {
      relay: (cpu.user + cpu.system) / 1000 / passes,
      ...(postgres === undefined ? {} : { postgres }),
      ...(proxyCpu === undefined ? {} : { proxy: proxyCpu }),
      ...(qstashCpu === undefined ? {} : { qstash: qstashCpu }),
    },
  };
}

export async function production(ctx: BenchContext): Promise<ProductionResult> {
  const { databaseMs, qstashMs } = ctx.delays;
  const floorMs = 2 * databaseMs + qstashMs;
  const drainFloorMs = databaseMs + qstashMs;
  const proxy = await startWsProxyProcess(databaseMs);
  const qstash = await startAcceptOnlyProcess(qstashMs);
  const undelayedProxy = await startWsProxyProcess(0);
  const worker = await startDelayedWorker({ databaseUrl: ctx.db.url, databaseMs, qstashMs });
  const manySweeps = PRODUCTION_RELAY_COUNTS.at(-1)!;
  const sweepEvents = ctx.sizes.workerdSweepBacklog;
  try {
    const pipelinedConnect = await pipelinedConnectOf(ctx.db.url);
    const useProxy = (p: WsProxyService) => configureNeonForWsProxy(p, pipelinedConnect);
    useProxy(proxy);
    const { ms: connectMs, roundTrips: connectRoundTrips } = await measureConnect(proxy, ctx.db.url);
    log(
      `production: database +${databaseMs} ms per round trip, QStash +${qstashMs} ms per request ` +
        `(floor ${floorMs} ms per pass); pipelined connect ${pipelinedConnect ? "yes" : "no"}, ` +
        `${connectRoundTrips} round trip(s) and ${connectMs.toFixed(0)} ms to connect and run a first query`,
    );

    const passes: ProductionPass[][] = [];
    const undelayedPasses: ProductionPass[][] = [];
    const singlePasses: ProductionPass[][] = [];
    const drains: ProductionDrain[] = [];
    const latencies: LatencyRun[] = [];
    const sweeps: { one: SweepsDrain; many: SweepsDrain }[] = [];
    // Warm the Worker (its isolate, the SDK's first requests), uncounted.
    await sweepsAtOnce(worker, ctx.db.admin, Math.min(sweepEvents, 4_000), manySweeps);
    for (let rep = 1; rep <= ctx.reps; rep++) {
      useProxy(undelayedProxy);
      const undelayed = await instrumentedDrain(ctx, undelayedProxy, ctx.acceptOnly);
      undelayedPasses.push(undelayed);
      useProxy(proxy);
      const timed = await instrumentedDrain(ctx, proxy, qstash);
      passes.push(timed);
      const single = await instrumentedDrain(ctx, proxy, qstash, ctx.sizes.productionBacklog, "single");
      singlePasses.push(single);
      const full = fullPasses(ctx, timed);
      const median = summarize(full.map((p) => p.ms)).median;
      const singleMedian = summarize(fullPasses(ctx, single).map((p) => p.ms)).median;
      log(
        `production rep ${rep}/${ctx.reps}: full pass ${median.toFixed(1)} ms = ${(median / floorMs).toFixed(2)} × floor ` +
          `(${(median / drainFloorMs).toFixed(2)} × a drain pass's ${drainFloorMs} ms), ` +
          `alone ${singleMedian.toFixed(1)} ms = ${(singleMedian / floorMs).toFixed(2)} × floor, ` +
          `${summarize(fullPasses(ctx, undelayed).map((p) => p.ms)).median.toFixed(1)} ms undelayed ` +
          `(publish ${summarize(full.map((p) => p.publishMs)).median.toFixed(1)} ms), round trips per pass ` +
          `${[...new Set(timed.map((p) => p.roundTrips))].join("/")}, QStash requests per full pass ` +
          `${[...new Set(full.map((p) => p.qstashRequests))].join("/")}`,
      );
      for (const relays of PRODUCTION_RELAY_COUNTS) {
        const run = await concurrentDrain(ctx, relays, proxy, qstash);
        drains.push(run);
        log(
          `production rep ${rep}/${ctx.reps} ${relays} relay(s): ${Math.round(run.events / (run.ms / 1000))} events/s, ` +
            `${(run.roundTrips / run.passes).toFixed(2)} round trips per pass, duplicates ${run.duplicates}, ` +
            `relay process CPU ${Math.round((100 * run.cpuMs) / run.ms)} % of wall time; CPU ms per pass: ` +
            Object.entries(run.cpuPerPassMs)
              .map(([k, v]) => `${k} ${v.toFixed(1)}`)
              .join(", "),
        );
      }
      const swept = await oneAndMany(worker, ctx.db.admin, sweepEvents, manySweeps, rep);
      sweeps.push(swept);
      log(
        `production rep ${rep}/${ctx.reps} workerd cron sweeps: 1 at ${Math.round(swept.one.eventsPerSecond)} events/s, ` +
          `${manySweeps} at once ${Math.round(swept.many.eventsPerSecond)} ` +
          `(${(swept.many.eventsPerSecond / swept.one.eventsPerSecond).toFixed(2)}×), workerd CPU per 1,000 events ` +
          `${swept.one.workerdCpuPer1k.toFixed(1)} / ${swept.many.workerdCpuPer1k.toFixed(1)} ms`,
      );
      const latency = await commitToPublished(ctx, {
        relays: newNeonPool(ctx.db.url, 8),
        qstash,
        reset: () => qstash.reset(),
      });
      latencies.push(latency);
      log(
        `production rep ${rep}/${ctx.reps}: commit → published p50 ${latency.p50.toFixed(1)} ms, ` +
          `p99 ${latency.p99.toFixed(1)} ms, left for the sweep ${latency.leftForSweep}`,
      );
    }

    const allFull = fullPasses(ctx, passes.flat());
    const medians = (pick: (p: ProductionPass) => number, of = passes) =>
      of.map((rep) => summarize(fullPasses(ctx, rep).map(pick)).median);
    const passMs = summarize(medians((p) => p.ms));
    const singlePassMs = summarize(medians((p) => p.ms, singlePasses));
    const allSingle = fullPasses(ctx, singlePasses.flat());
    const eventsPerSecond: Record<number, Summary> = {};
    const cpuPerPassMs: ProductionResult["cpuPerPassMs"] = {};
    for (const n of PRODUCTION_RELAY_COUNTS) {
      const of = drains.filter((d) => d.relays === n);
      eventsPerSecond[n] = summarize(of.map((d) => d.events / (d.ms / 1000)));
      const by = (k: keyof CpuPerPass) => {
        const xs = of.map((d) => d.cpuPerPassMs[k]);
        return xs.every((x): x is number => x !== undefined) ? summarize(xs) : undefined;
      };
      cpuPerPassMs[n] = {
        relay: by("relay"),
        postgres: by("postgres"),
        proxy: by("proxy"),
        qstash: by("qstash"),
      };
    }
    return {
      delays: { databaseMs, qstashMs },
      floorMs,
      drainFloorMs,
      pipelinedConnect,
      connectRoundTrips,
      connectMs,
      passMs,
      publishMs: summarize(medians((p) => p.publishMs)),
      passOverFloor: summarize(passMs.runs.map((ms) => ms / floorMs)),
      passOverDrainFloor: summarize(passMs.runs.map((ms) => ms / drainFloorMs)),
      singlePass: {
        passMs: singlePassMs,
        passOverFloor: summarize(singlePassMs.runs.map((ms) => ms / floorMs)),
        roundTripsPerPass: {
          min: Math.min(...allSingle.map((p) => p.roundTrips)),
          max: Math.max(...allSingle.map((p) => p.roundTrips)),
        },
      },
      undelayedPassMs: summarize(medians((p) => p.ms, undelayedPasses)),
      roundTripsPerPass: {
        median: summarize(allFull.map((p) => p.roundTrips)).median,
        min: Math.min(...allFull.map((p) => p.roundTrips)),
        max: Math.max(...allFull.map((p) => p.roundTrips)),
        empty: Math.max(...passes.map((rep) => rep.at(-1)!.roundTrips)),
      },
      qstashRequestsPerPass: {
        min: Math.min(...allFull.map((p) => p.qstashRequests)),
        max: Math.max(...allFull.map((p) => p.qstashRequests)),
      },
      eventsPerSecond,
      cpuPerPassMs,
      duplicates: drains.reduce((sum, d) => sum + d.duplicates, 0),
      incompleteFanout: drains.reduce((sum, d) => sum + d.incompleteFanout, 0),
      latency: summarizeLatency(latencies),
      workerdSweeps: {
        events: sweepEvents,
        eventsPerSecond: {
          1: summarize(sweeps.map((s) => s.one.eventsPerSecond)),
          [manySweeps]: summarize(sweeps.map((s) => s.many.eventsPerSecond)),
        },
        manyOverOne: summarize(sweeps.map((s) => s.many.eventsPerSecond / s.one.eventsPerSecond)),
        workerdCpuPer1k: {
          1: summarize(sweeps.map((s) => s.one.workerdCpuPer1k)),
          [manySweeps]: summarize(sweeps.map((s) => s.many.workerdCpuPer1k)),
        },
      },
      raw: { passes, undelayedPasses, singlePasses, drains, workerdSweeps: sweeps },
    };
  } finally {
    await Promise.all([proxy.close(), qstash.close(), undelayedProxy.close(), worker.close()]);
  }
}
