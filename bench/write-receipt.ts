/**
 * `npm run bench:write [-- --reps <n>] [--writes <n>] [--concurrency <n>] [--sequential <n>] [--json <file>] [--worker <checkout>] [--compare <checkout>]
 *   [--far-edge-rtt <ms>] [--near-db-rtt <ms>] [--direct]`
 *
 * A write and its receipt, end to end (issue 11 item 7), through the stack
 * `npm run dev` runs: Postgres (embedded, or DATABASE_URL's server: a database
 * edge_outbox_bench_<pid> is created and dropped), the WebSocket proxy, the QStash
 * dev server delivering to the Worker, the mail/webhook sink and the Worker in
 * workerd (infra/workerd-stack.ts). In one run, per repetition:
 *
 * 1. `GET /healthz` (one query: the schema's newest migration) under the load the writes get: the limit
 *    wrangler dev and workerd set on this machine;
 * 2. `POST /notes` with `Prefer: wait=5` under that load: writes/s, latency, and
 *    whether every receipt came back complete;
 * 3. database round trips and connections per write with its receipt, counted by
 *    the proxy over sequential writes with QStash delivery paused (so only the
 *    write's own requests are counted);
 * 4. the same sequential writes with 10 ms added to every database round trip and
 *    30 ms to every QStash publish: write → receipt latency against its floor
 *    (round trips × 10 ms + 30 ms);
 * 5. the same again at two placements of the Worker (issue 11 item 8): far from
 *    its database (`--far-edge-rtt`, 80 ms per round trip) and next to it
 *    (`--near-db-rtt`, 5 ms), the QStash publish still 30 ms: what Smart
 *    Placement buys a write and its receipt.
 *
 * The Worker reaches Postgres through the proxy's transaction-mode pooler, as a
 * deployment reaches Neon's pooled endpoint (ADR 0015); `--direct` connects it
 * straight to Postgres instead, a backend started per connection, for comparison.
 *
 * `--worker <checkout>` runs another checkout's Worker (its wrangler.toml and src,
 * with node_modules reachable from it) in this stack, e.g. the code before a change.
 * `--compare <checkout>` runs that checkout's Worker too, in a stack of its own on
 * the same database, through the same `/healthz` and write loads in every
 * repetition (before this Worker's in odd repetitions, after in even ones): a
 * before/after within one run, with its notes / healthz, CPU per request by
 * process and round trips per write beside this Worker's.
 * Progress goes to stderr, the table to stdout, raw figures to --json.
 */
import { writeFile } from "node:fs/promises";
import { arch, cpus, loadavg, platform, totalmem } from "node:os";
import { resolve } from "node:path";
import { DEV_KEY_SCOPE, ensureDevApiKey, newDevApiKey } from "../infra/dev-api-key.ts";
import { startWorkerdStack, type WorkerdStack } from "../infra/workerd-stack.ts";
import { isSettled } from "../infra/qstash-dev/server.ts";
import { startWsProxy, takesPipelinedConnect } from "../infra/ws-proxy.ts";
import { pairedTarget, target, type Target } from "./report.ts";
import { benchCommandLine, wholeOption } from "./support/args.ts";
import { openBenchDatabase } from "./support/db.ts";
import { runLoad, type LoadResult } from "./support/load.ts";
import {
  PLACEMENTS,
  explainedByRoundTrips,
  farOverNear,
  placementOptions,
  placementOrder,
  placementRtts,
  type Placement,
} from "./support/placement.ts";
import { cpuPer, cpuSample, type CpuSample } from "./support/process-cpu.ts";
import { log, stopOnSignal } from "./support/progress.ts";
import { percentile, summarize, type Summary } from "./support/stats.ts";
import { workerBindings } from "./support/worker-bindings.ts";

const USAGE = `usage: npm run bench:write [-- options]

A write and its receipt, end to end, through the stack \`npm run dev\` runs, beside a
trivial route under the same load. Postgres: DATABASE_URL's server when set,
otherwise an embedded one.

  --reps <n>              repetitions (default 3)
  --writes <n>            writes per repetition (default 500)
  --concurrency <n>       writes in flight at once (default 20)
  --sequential <n>        writes one at a time, for round trips and latency (default 40)
  --direct                the Worker straight to Postgres, not through the pooler
  --worker <checkout>     run another checkout's Worker instead of this one's
  --compare <checkout>    run another checkout's Worker beside this one's
  --far-edge-rtt <ms>     far from the database (default 80)
  --near-db-rtt <ms>      next to it (default 5)
  --json <file>           raw figures`;

const { values, reps, writes, concurrency, sequential, rtts } = benchCommandLine(
  USAGE,
  {
    reps: { type: "string", default: "3" },
    writes: { type: "string", default: "500" },
    concurrency: { type: "string", default: "20" },
    sequential: { type: "string", default: "40" },
    json: { type: "string" },
    worker: { type: "string" },
    compare: { type: "string" },
    direct: { type: "boolean", default: false },
    ...placementOptions,
  },
  (values) => ({
    values,
    reps: wholeOption("reps", values.reps),
    writes: wholeOption("writes", values.writes),
    concurrency: wholeOption("concurrency", values.concurrency),
    sequential: wholeOption("sequential", values.sequential),
    rtts: placementRtts(values),
  }),
);

/** Production-shaped delays (issue 11 item 4): per database round trip and per QStash publish. */
const DB_DELAY_MS = 10;
const QSTASH_DELAY_MS = 30;

const startedAt = new Date();
const started = performance.now();
const db = await openBenchDatabase();
// Through the pooler the connect is always pipelined (it answers the start-up itself);
// direct, a server that refuses the early password (trust, SCRAM) is connected the slow way.
const pooled = !values.direct;
const probe = await startWsProxy();
const pipelined = pooled || (await takesPipelinedConnect(probe, db.url).finally(() => probe.close()));
if (pooled) await probe.close();
const apiKey = newDevApiKey();
await ensureDevApiKey(db.url, apiKey);
log(
  `database ${db.server}, ${pooled ? "pooled" : "direct"}, pipelined connect ${pipelined ? "on" : "off (the server refuses it)"}`,
);

let stack: WorkerdStack | undefined;
/** `--compare`: another checkout's Worker, in a stack of its own on the same database. */
let other: WorkerdStack | undefined;
const stopOnce = async () => {
  await other?.close();
  await stack?.close();
  await db.close();
};
const stop = stopOnSignal(stopOnce);

interface Repetition {
  healthz: LoadSummary;
  notes: LoadSummary & {
    incomplete: number;
    /** Round trips and connections per write during the load. */
    roundTrips: number;
    connections: number;
  };
  /** The same writes while QStash delivers their jobs to the same workerd, as in `npm run dev`. */
  notesDelivering: LoadSummary & { incomplete: number };
  /** Write → receipt one at a time, no added delay. */
  sequential: { p50: number; p99: number };
  /** Per write with its receipt, one write at a time. */
  perWrite: { roundTrips: number; connections: number; clientFrames: number; cpu: CpuSample };
  /** Per `GET /healthz`, the same way. */
  perHealthz: { roundTrips: number; connections: number; cpu: CpuSample };
  delayed: DelayedWrites;
  /** The same, each write with an Idempotency-Key of its own (ADR 0035). */
  keyedDelayed: DelayedWrites;
  /** The delayed writes again with the Worker far from its database and next to it. */
  placement: Record<Placement, DelayedWrites>;
  /** Load average (1 min) when the repetition started and ended. */
  load: [number, number];
}

/** Sequential writes with their receipts under added delays. */
interface DelayedWrites {
  databaseRttMs: number;
  p50: number;
  p99: number;
  /** Database round trips per write, counted by the proxy during these writes. */
  roundTrips: number;
  /** Round trips × database RTT + the QStash publish delay. */
  floorMs: number;
  incomplete: number;
}

interface LoadSummary {
  perSecond: number;
  p50: number;
  p99: number;
  /** CPU time per request (user + system) of workerd, Postgres and this process, from /proc. */
  cpu: CpuSample;
}

/** The compared Worker's figures in one repetition (`--compare`). */
interface ComparedRepetition {
  healthz: LoadSummary;
  notes: LoadSummary & { incomplete: number; roundTrips: number; connections: number };
  roundTripsPerWrite: number;
  /** CPU per request by process, one request at a time (no contention between them). */
  sequentialCpu: { healthz: CpuSample; write: CpuSample };
}

const repetitions: Repetition[] = [];
const compared: ComparedRepetition[] = [];
try {
  const startStack = (checkout: string | undefined) =>
    startWorkerdStack({
      databaseUrl: db.url,
      ...(pooled ? {} : { proxy: { pool: false as const } }),
      ...(checkout ? { config: resolve(checkout, "wrangler.toml") } : {}),
      bindings: { ...workerBindings(), ...(pipelined ? {} : { NEON_PIPELINE_CONNECT: "off" }) },
    });
  stack = await startStack(values.worker);
  if (values.compare) {
    other = await startStack(values.compare);
    // The compared Worker's deliveries are held for the whole run (its jobs are
    // dropped after each repetition), so it never loads the machine while this
    // Worker is measured.
    other.qstash.pauseDelivery();
  }
  const s = stack;
  log(`Worker at ${s.url}`);
  const auth = { authorization: `Bearer ${apiKey}` };

  const healthzOf = (s: WorkerdStack) => async () => {
    const res = await s.fetch("/healthz");
    await res.text();
    return res.status === 200;
  };
  // Complete: 201 and every event fanned out. Anything else (202, an error) is not.
  // `keyed`: each write with an Idempotency-Key of its own, as a client that retries sends.
  const noteOf =
    (s: WorkerdStack, keyed = false) =>
    async (i: number) => {
      const res = await s.fetch("/notes", {
        method: "POST",
        headers: {
          ...auth,
          "content-type": "application/json",
          prefer: "wait=5",
          ...(keyed ? { "idempotency-key": crypto.randomUUID() } : {}),
        },
        body: JSON.stringify({ title: `bench note ${i}`, body: "a write and its receipt" }),
      });
      const text = await res.text();
      if (res.status !== 201) return false;
      const body = JSON.parse(text) as { events: { fannedOutAt: string | null }[] };
      return body.events.length > 0 && body.events.every((e) => e.fannedOutAt !== null);
    };
  const healthz = healthzOf(s);
  const note = noteOf(s);
  const keyedNote = noteOf(s, true);
  const measured = async (total: number, c: number, send: (i: number) => Promise<boolean>) => {
    const cpu = cpuSample();
    const r = await runLoad(total, c, send);
    return { load: r, summary: summary(r, cpuPer(cpu, cpuSample(), total)) };
  };

  /**
   * `sequential` `/healthz` requests, then as many writes, one at a time on `o` after
   * a quiet moment, so every round trip the proxy counts and every CPU tick is that
   * request's: per request, the counts and CPU of each, and the writes' own load.
   */
  const oneAtATime = async (
    o: WorkerdStack,
    h: () => Promise<boolean>,
    w: (i: number) => Promise<boolean>,
  ) => {
    await quiet();
    const before = o.proxy.stats();
    const cpu0 = cpuSample();
    await runLoad(sequential, 1, h);
    const cpu1 = cpuSample();
    const mid = o.proxy.stats();
    const writesLoad = await runLoad(sequential, 1, w);
    const after = o.proxy.stats();
    const cpu2 = cpuSample();
    const per = (a: typeof before, b: typeof before) => ({
      roundTrips: (b.roundTrips - a.roundTrips) / sequential,
      connections: (b.connections - a.connections) / sequential,
    });
    return {
      writes: writesLoad,
      healthz: { ...per(before, mid), cpu: cpuPer(cpu0, cpu1, sequential) },
      write: {
        ...per(mid, after),
        clientFrames: (after.clientFrames - mid.clientFrames) / sequential,
        cpu: cpuPer(cpu1, cpu2, sequential),
      },
    };
  };

  /** `/healthz` and the writes under the same loads, and round trips per write one at a time, on the compared Worker. */
  const comparedLoads = async (o: WorkerdStack): Promise<ComparedRepetition> => {
    const oh = healthzOf(o);
    const on = noteOf(o);
    const h = await measured(writes, concurrency, oh);
    const before = o.proxy.stats();
    const n = await measured(writes, concurrency, on);
    const mid = o.proxy.stats();
    const one = await oneAtATime(o, oh, on);
    o.qstash.reset();
    log(
      `rep ${repetitions.length + 1}: compared Worker: healthz ${h.summary.perSecond.toFixed(1)}/s, ` +
        `notes ${n.summary.perSecond.toFixed(1)}/s, incomplete ${n.load.failed + one.writes.failed}`,
    );
    return {
      healthz: h.summary,
      notes: {
        ...n.summary,
        incomplete: n.load.failed + one.writes.failed,
        roundTrips: (mid.roundTrips - before.roundTrips) / writes,
        connections: (mid.connections - before.connections) / writes,
      },
      roundTripsPerWrite: one.write.roundTrips,
      sequentialCpu: { healthz: one.healthz.cpu, write: one.write.cpu },
    };
  };

  // Warm-up: the first requests compile the bundle and open the first connections.
  await runLoad(40, concurrency, healthz);
  await runLoad(40, concurrency, note);
  if (other) {
    await runLoad(40, concurrency, healthzOf(other));
    await runLoad(40, concurrency, noteOf(other));
  }

  for (let rep = 1; rep <= reps; rep++) {
    const loadAtStart = loadavg()[0]!;
    // The compared Worker runs the same two loads right before this one's in odd
    // repetitions and right after them in even ones, so neither always goes first.
    const compareFirst = other !== undefined && rep % 2 === 1;
    if (other && compareFirst) compared.push(await comparedLoads(other));
    const h = await measured(writes, concurrency, healthz);
    log(`rep ${rep}: healthz ${h.summary.perSecond.toFixed(1)}/s, p50 ${h.summary.p50.toFixed(0)} ms`);

    // The write path alone: QStash holds its deliveries (in production it delivers
    // from its own servers to other isolates), so the Worker and the proxy see only
    // the writes; the counts and the delayed latency below are taken the same way.
    s.qstash.pauseDelivery();
    let n: Awaited<ReturnType<typeof measured>>;
    let nStats: { roundTrips: number; connections: number };
    let perWrite: Repetition["perWrite"];
    let perHealthz: Repetition["perHealthz"];
    let sequentialMs: { p50: number; p99: number };
    let delayed: DelayedWrites;
    let keyedDelayed: DelayedWrites;
    const placed = {} as Record<Placement, DelayedWrites>;
    // One write at a time with the proxy holding every database reply `databaseRttMs`
    // and QStash every publish QSTASH_DELAY_MS; delays back to 0 afterwards.
    const delayedWrites = async (databaseRttMs: number, send = note): Promise<DelayedWrites> => {
      s.proxy.setDelayMs(databaseRttMs);
      s.qstash.setPublishLatency(QSTASH_DELAY_MS);
      try {
        await quiet();
        const before = s.proxy.stats();
        const r = await runLoad(sequential, 1, send);
        const roundTrips = (s.proxy.stats().roundTrips - before.roundTrips) / sequential;
        return {
          databaseRttMs,
          p50: percentile(r.latencies, 50),
          p99: percentile(r.latencies, 99),
          roundTrips,
          floorMs: roundTrips * databaseRttMs + QSTASH_DELAY_MS,
          incomplete: r.failed,
        };
      } finally {
        s.proxy.setDelayMs(0);
        s.qstash.setPublishLatency(0);
      }
    };
    try {
      const beforeLoad = s.proxy.stats();
      n = await measured(writes, concurrency, note);
      const afterLoad = s.proxy.stats();
      nStats = {
        roundTrips: (afterLoad.roundTrips - beforeLoad.roundTrips) / writes,
        connections: (afterLoad.connections - beforeLoad.connections) / writes,
      };
      log(
        `rep ${rep}: notes ${n.summary.perSecond.toFixed(1)}/s, p50 ${n.summary.p50.toFixed(0)} ms, ` +
          `p99 ${n.summary.p99.toFixed(0)} ms, incomplete ${n.load.failed}, ${nStats.roundTrips.toFixed(2)} round trips each`,
      );
      if (other && !compareFirst) compared.push(await comparedLoads(other));

      // Counting: one request at a time, so every round trip is that request's.
      const one = await oneAtATime(s, healthz, note);
      const counted = one.writes;
      if (counted.failed > 0) throw new Error(`${counted.failed} receipts incomplete while counting`);
      perHealthz = one.healthz;
      perWrite = one.write;
      sequentialMs = { p50: percentile(counted.latencies, 50), p99: percentile(counted.latencies, 99) };
      log(
        `rep ${rep}: per write ${perWrite.roundTrips} round trips, ${perWrite.connections} connections ` +
          `(healthz ${perHealthz.roundTrips}, ${perHealthz.connections}); one at a time p50 ${sequentialMs.p50.toFixed(0)} ms`,
      );

      delayed = await delayedWrites(DB_DELAY_MS);
      keyedDelayed = await delayedWrites(DB_DELAY_MS, keyedNote);
      for (const p of placementOrder(rep)) {
        placed[p] = await delayedWrites(rtts[p]);
        log(
          `rep ${rep}: ${p} (+${rtts[p]} ms per round trip, +${QSTASH_DELAY_MS} ms per publish): ` +
            `write → receipt p50 ${placed[p].p50.toFixed(0)} ms, p99 ${placed[p].p99.toFixed(0)} ms, ` +
            `${placed[p].roundTrips.toFixed(2)} round trips per write (floor ${placed[p].floorMs.toFixed(0)} ms), ` +
            `incomplete ${placed[p].incomplete}`,
        );
      }
    } finally {
      s.qstash.resumeDelivery();
    }
    await deliveriesSettled(s);
    const d = delayed;
    log(
      `rep ${rep}: delayed write → receipt p50 ${d.p50.toFixed(0)} ms, p99 ${d.p99.toFixed(0)} ms ` +
        `(floor ${d.floorMs.toFixed(0)} ms), incomplete ${d.incomplete}`,
    );
    log(
      `rep ${rep}: same with an Idempotency-Key p50 ${keyedDelayed.p50.toFixed(0)} ms, ` +
        `p99 ${keyedDelayed.p99.toFixed(0)} ms, ${keyedDelayed.roundTrips.toFixed(2)} round trips per write`,
    );

    // As `npm run dev` runs: QStash delivers each note's two jobs back to the same workerd meanwhile.
    const nd = await measured(writes, concurrency, note);
    log(
      `rep ${rep}: notes while delivering ${nd.summary.perSecond.toFixed(1)}/s, p50 ${nd.summary.p50.toFixed(0)} ms, ` +
        `p99 ${nd.summary.p99.toFixed(0)} ms, incomplete ${nd.load.failed}`,
    );
    await deliveriesSettled(s);

    repetitions.push({
      healthz: h.summary,
      notes: { ...n.summary, incomplete: n.load.failed, ...nStats },
      notesDelivering: { ...nd.summary, incomplete: nd.load.failed },
      perWrite,
      perHealthz,
      sequential: sequentialMs,
      delayed: d,
      keyedDelayed,
      placement: placed,
      load: [loadAtStart, loadavg()[0]!],
    });
  }
} finally {
  await stop();
}

const of = (pick: (r: Repetition) => number): Summary => summarize(repetitions.map(pick));
const total = (c: CpuSample) => c.workerdMs + c.postgresMs + c.nodeMs;
/** CPU per request of each process, summarised over the repetitions. */
const cpuOf = (pick: (r: Repetition) => CpuSample) => ({
  workerd: of((r) => pick(r).workerdMs),
  postgres: of((r) => pick(r).postgresMs),
  node: of((r) => pick(r).nodeMs),
});
const results = {
  healthzPerSecond: of((r) => r.healthz.perSecond),
  healthzP50Ms: of((r) => r.healthz.p50),
  healthzCpuMs: cpuOf((r) => r.healthz.cpu),
  notesPerSecond: of((r) => r.notes.perSecond),
  notesP50Ms: of((r) => r.notes.p50),
  notesP99Ms: of((r) => r.notes.p99),
  notesCpuMs: cpuOf((r) => r.notes.cpu),
  notesIncomplete: of((r) => r.notes.incomplete),
  notesRoundTrips: of((r) => r.notes.roundTrips),
  notesDeliveringPerSecond: of((r) => r.notesDelivering.perSecond),
  notesDeliveringP50Ms: of((r) => r.notesDelivering.p50),
  notesDeliveringP99Ms: of((r) => r.notesDelivering.p99),
  notesDeliveringCpuMs: cpuOf((r) => r.notesDelivering.cpu),
  sequentialP50Ms: of((r) => r.sequential.p50),
  sequentialP99Ms: of((r) => r.sequential.p99),
  notesConnections: of((r) => r.notes.connections),
  roundTripsPerWrite: of((r) => r.perWrite.roundTrips),
  connectionsPerWrite: of((r) => r.perWrite.connections),
  roundTripsPerHealthz: of((r) => r.perHealthz.roundTrips),
  /** CPU per request by process one request at a time, where no request waits for another. */
  sequentialHealthzCpuMs: cpuOf((r) => r.perHealthz.cpu),
  sequentialWriteCpuMs: cpuOf((r) => r.perWrite.cpu),
  /** Per repetition, CPU of a /healthz over CPU of a write (all three processes): the throughput ratio CPU alone allows. */
  sequentialCpuHealthzOverWrite: of((r) => total(r.perHealthz.cpu) / total(r.perWrite.cpu)),
  delayedP50Ms: of((r) => r.delayed.p50),
  delayedP99Ms: of((r) => r.delayed.p99),
  delayedFloorMs: of((r) => r.delayed.floorMs),
  delayedP50OverFloor: of((r) => r.delayed.p50 / r.delayed.floorMs),
  /** A report (no target): what an Idempotency-Key adds to a write with its receipt, under the same delays. */
  keyedDelayedP50Ms: of((r) => r.keyedDelayed.p50),
  keyedDelayedP99Ms: of((r) => r.keyedDelayed.p99),
  keyedRoundTripsPerWrite: of((r) => r.keyedDelayed.roundTrips),
  keyedOverUnkeyedDelayedP50: of((r) => r.keyedDelayed.p50 / r.delayed.p50),
  /**
   * Issue 11 item 8, a report (no target): write → receipt with the Worker far from
   * its database and next to it, QStash's publish delay the same at both.
   */
  placement: placementResults(),
  loadAverage: summarize(repetitions.flatMap((r) => r.load)),
  /** `--compare`: the other checkout's Worker under the same loads, in the same repetitions. */
  compare: comparedResults(),
};
function comparedResults() {
  if (compared.length === 0) return undefined;
  const ofC = (pick: (c: ComparedRepetition) => number): Summary => summarize(compared.map(pick));
  const cpuOfC = (pick: (c: ComparedRepetition) => CpuSample) => ({
    workerd: ofC((c) => pick(c).workerdMs),
    postgres: ofC((c) => pick(c).postgresMs),
    node: ofC((c) => pick(c).nodeMs),
  });
  const notesPerSecond = ofC((c) => c.notes.perSecond);
  const healthzPerSecond = ofC((c) => c.healthz.perSecond);
  return {
    worker: values.compare,
    healthzPerSecond,
    healthzCpuMs: cpuOfC((c) => c.healthz.cpu),
    notesPerSecond,
    notesP50Ms: ofC((c) => c.notes.p50),
    notesCpuMs: cpuOfC((c) => c.notes.cpu),
    notesIncomplete: ofC((c) => c.notes.incomplete),
    notesRoundTrips: ofC((c) => c.notes.roundTrips),
    roundTripsPerWrite: ofC((c) => c.roundTripsPerWrite),
    sequentialHealthzCpuMs: cpuOfC((c) => c.sequentialCpu.healthz),
    sequentialWriteCpuMs: cpuOfC((c) => c.sequentialCpu.write),
    sequentialCpuHealthzOverWrite: ofC((c) => total(c.sequentialCpu.healthz) / total(c.sequentialCpu.write)),
    /** Per-repetition notes / healthz of the compared Worker. */
    notesOverHealthz: summarize(notesPerSecond.runs.map((n, i) => n / healthzPerSecond.runs[i]!)),
    /** Per repetition: this Worker's notes / healthz over the compared Worker's. */
    ratioThisOverCompared: summarize(
      compared.map(
        (c, i) =>
          repetitions[i]!.notes.perSecond /
          repetitions[i]!.healthz.perSecond /
          (c.notes.perSecond / c.healthz.perSecond),
      ),
    ),
  };
}
function placementResults() {
  const at = (p: Placement) => ({
    databaseRttMs: rtts[p],
    p50Ms: of((r) => r.placement[p].p50),
    p99Ms: of((r) => r.placement[p].p99),
    roundTripsPerWrite: of((r) => r.placement[p].roundTrips),
    floorMs: of((r) => r.placement[p].floorMs),
  });
  const farEdge = at("farEdge");
  const nearDatabase = at("nearDatabase");
  return {
    qstashPublishMs: QSTASH_DELAY_MS,
    farEdge,
    nearDatabase,
    /** Per-repetition ratios, far edge / near the database. */
    farOverNear: {
      p50: farOverNear(farEdge.p50Ms, nearDatabase.p50Ms),
      p99: farOverNear(farEdge.p99Ms, nearDatabase.p99Ms),
    },
    /** (far − near p50) / (round trips × RTT difference): 1 when distance explains it all. */
    p50ExplainedByRoundTrips: explainedByRoundTrips(
      farEdge.p50Ms,
      nearDatabase.p50Ms,
      farEdge.roundTripsPerWrite,
      rtts,
    ),
  };
}

const targets: Target[] = [
  pairedTarget(
    "notesOverHealthz",
    `notes with receipts / GET /healthz, concurrency ${concurrency}, QStash delivery held`,
    results.notesPerSecond,
    results.healthzPerSecond,
    "min",
    0.5,
  ),
  pairedTarget(
    "notesDeliveringOverHealthz",
    `same, QStash delivering each note's two jobs to the same workerd (as npm run dev)`,
    results.notesDeliveringPerSecond,
    results.healthzPerSecond,
    "min",
    0.5,
  ),
  target(
    "incompleteReceipts",
    "receipts not complete within wait=5 (all repetitions)",
    repetitions.reduce(
      (n, r) =>
        n +
        r.notes.incomplete +
        r.notesDelivering.incomplete +
        r.delayed.incomplete +
        r.keyedDelayed.incomplete +
        PLACEMENTS.reduce((m, p) => m + r.placement[p].incomplete, 0),
      0,
    ),
    "max",
    0,
  ),
];

const seconds = (performance.now() - started) / 1000;
const machine = `${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GB, ${platform()} ${arch()}`;
process.stdout.write(`${table()}\n`);
if (values.json) {
  await writeFile(
    values.json,
    `${JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        seconds,
        reps,
        writes,
        concurrency,
        sequential,
        delays: { databaseRoundTripMs: DB_DELAY_MS, qstashPublishMs: QSTASH_DELAY_MS },
        placementRtts: rtts,
        worker: values.worker ?? "this checkout",
        compare: values.compare ?? null,
        database: db.server,
        pooled,
        pipelinedConnect: pipelined,
        scope: DEV_KEY_SCOPE,
        node: process.version,
        machine,
        targets,
        results,
        repetitions,
      },
      null,
      2,
    )}\n`,
  );
  log(`raw figures written to ${values.json}`);
}

function summary(r: LoadResult, cpu: CpuSample): LoadSummary {
  return { perSecond: r.perSecond, p50: percentile(r.latencies, 50), p99: percentile(r.latencies, 99), cpu };
}

/** Lets the Worker finish what the last requests left in the background (kicks). */
function quiet(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 1_000));
}

/** Until QStash has delivered every job it accepted (or given up on it), then forgets them. */
async function deliveriesSettled(s: WorkerdStack): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const left = s.qstash.messages().filter((m) => !isSettled(m.state)).length;
    if (left === 0) break;
    if (Date.now() > deadline) throw new Error(`QStash still has ${left} jobs to deliver after 180 s`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  // The next load starts from an empty store, as the first did.
  s.qstash.reset();
}

/** The compared Worker's rows, beside this one's, when `--compare` ran. */
function comparedRows(): [string, Summary, (x: number) => string][] {
  const c = results.compare;
  if (!c) return [];
  const f1 = (x: number) => x.toFixed(1);
  const f2 = (x: number) => x.toFixed(2);
  // CPU per request by process, under the total of the three, repetition by repetition.
  const cpuWithTotal = (
    unit: string,
    cpu: { workerd: Summary; postgres: Summary; node: Summary },
  ): [string, Summary, (x: number) => string][] => [
    [
      `  CPU per ${unit} (ms): workerd + Postgres + Node`,
      summarize(cpu.workerd.runs.map((w, i) => w + cpu.postgres.runs[i]! + cpu.node.runs[i]!)),
      f1,
    ],
    ["  workerd", cpu.workerd, f1],
    ["  Postgres", cpu.postgres, f1],
    ["  Node", cpu.node, f1],
  ];
  return [
    [`compared Worker (${c.worker}): GET /healthz (requests/s)`, c.healthzPerSecond, f1],
    ...cpuWithTotal("request", c.healthzCpuMs),
    ["  POST /notes + Prefer: wait=5 (writes/s)", c.notesPerSecond, f1],
    ...cpuWithTotal("write", c.notesCpuMs),
    ["  incomplete receipts", c.notesIncomplete, (x) => x.toFixed(0)],
    ["  round trips per write, under the load / one at a time", c.notesRoundTrips, f2],
    ["  ", c.roundTripsPerWrite, f2],
    ["  one at a time, CPU per /healthz (ms): workerd", c.sequentialHealthzCpuMs.workerd, f1],
    ["    Postgres", c.sequentialHealthzCpuMs.postgres, f1],
    ["    Node", c.sequentialHealthzCpuMs.node, f1],
    ["  one at a time, CPU per write (ms): workerd", c.sequentialWriteCpuMs.workerd, f1],
    ["    Postgres", c.sequentialWriteCpuMs.postgres, f1],
    ["    Node", c.sequentialWriteCpuMs.node, f1],
    ["  CPU per /healthz / CPU per write, one at a time", c.sequentialCpuHealthzOverWrite, f2],
    ["  notes / healthz (per repetition)", c.notesOverHealthz, f2],
    ["this Worker's notes / healthz over the compared one's", c.ratioThisOverCompared, f2],
  ];
}

function table(): string {
  const f0 = (x: number) => x.toFixed(0);
  const f1 = (x: number) => x.toFixed(1);
  const f2 = (x: number) => x.toFixed(2);
  const cpuRows = (c: { workerd: Summary; postgres: Summary; node: Summary }, unit: string) =>
    [
      [`  CPU per ${unit} (ms): workerd`, c.workerd, f1],
      ["    Postgres", c.postgres, f1],
      ["    Node (ws proxy, QStash dev, load)", c.node, f1],
    ] as [string, Summary, (x: number) => string][];
  const rows: [string, Summary, (x: number) => string][] = [
    [`GET /healthz, concurrency ${concurrency} (requests/s)`, results.healthzPerSecond, f1],
    ["  p50 (ms)", results.healthzP50Ms, f0],
    ...cpuRows(results.healthzCpuMs, "request"),
    [`POST /notes + Prefer: wait=5, concurrency ${concurrency} (writes/s)`, results.notesPerSecond, f1],
    ["  p50 (ms)", results.notesP50Ms, f0],
    ["  p99 (ms)", results.notesP99Ms, f0],
    ...cpuRows(results.notesCpuMs, "write"),
    ["  incomplete receipts", results.notesIncomplete, f0],
    ["  database round trips per write", results.notesRoundTrips, f2],
    ["same, QStash delivering to the Worker meanwhile (writes/s)", results.notesDeliveringPerSecond, f1],
    ["  p50 (ms)", results.notesDeliveringP50Ms, f0],
    ["  p99 (ms)", results.notesDeliveringP99Ms, f0],
    ...cpuRows(results.notesDeliveringCpuMs, "write"),
    ["database round trips per write with receipt, one at a time", results.roundTripsPerWrite, f2],
    ["  connections per write", results.connectionsPerWrite, f2],
    ["  round trips per GET /healthz", results.roundTripsPerHealthz, f2],
    ...cpuRows(results.sequentialHealthzCpuMs, "GET /healthz, one at a time"),
    ...cpuRows(results.sequentialWriteCpuMs, "write, one at a time"),
    ["  CPU per /healthz / CPU per write, one at a time", results.sequentialCpuHealthzOverWrite, f2],
    ["  write → receipt p50 (ms)", results.sequentialP50Ms, f0],
    ["  write → receipt p99 (ms)", results.sequentialP99Ms, f0],
    [
      `same, +${DB_DELAY_MS} ms per database round trip, +${QSTASH_DELAY_MS} ms per publish: p50 (ms)`,
      results.delayedP50Ms,
      f0,
    ],
    ["  p99 (ms)", results.delayedP99Ms, f0],
    ["  floor: round trips × delay + publish delay (ms)", results.delayedFloorMs, f0],
    ["  p50 / floor", results.delayedP50OverFloor, f2],
    ["  with an Idempotency-Key: p50 (ms)", results.keyedDelayedP50Ms, f0],
    ["    p99 (ms)", results.keyedDelayedP99Ms, f0],
    ["    database round trips per write", results.keyedRoundTripsPerWrite, f2],
    ["    p50 keyed / p50 without a key", results.keyedOverUnkeyedDelayedP50, f2],
    ...PLACEMENTS.flatMap((p) => {
      const x = results.placement[p];
      const name = p === "farEdge" ? "far edge" : "near the database";
      return [
        [
          `${name}: +${x.databaseRttMs} ms per round trip, +${QSTASH_DELAY_MS} ms per publish: p50 (ms)`,
          x.p50Ms,
          f0,
        ],
        ["  p99 (ms)", x.p99Ms, f0],
        ["  database round trips per write", x.roundTripsPerWrite, f2],
        ["  floor: round trips × RTT + publish delay (ms)", x.floorMs, f0],
      ] as [string, Summary, (x: number) => string][];
    }),
    ["write → receipt far edge / near the database: p50", results.placement.farOverNear.p50, f2],
    ["  p99", results.placement.farOverNear.p99, f2],
    ["  p50 difference / (round trips × RTT difference)", results.placement.p50ExplainedByRoundTrips, f2],
    ["load average (1 min) at each repetition's start and end", results.loadAverage, f1],
    ...comparedRows(),
  ];
  const header = ["measure", `median of ${reps}`, "min", "max"];
  const cells = rows.map(([name, s, f]) => [name, f(s.median), f(s.min), f(s.max)]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c.map((x, i) => (i === 0 ? x.padEnd(widths[0]!) : x.padStart(widths[i]!))).join("  ");
  const lines = [
    line(header),
    widths.map((w) => "-".repeat(w)).join("  "),
    ...cells.map(line),
    "",
    "targets",
  ];
  for (const t of targets) {
    const spread = t.perRepetition ? `  [${f2(t.perRepetition.min)}–${f2(t.perRepetition.max)}]` : "";
    lines.push(
      `  ${t.name}: ${Number.isInteger(t.value) ? t.value : f2(t.value)} ${t.kind === "min" ? "≥" : "≤"} ${t.limit}  ${t.met ? "met" : "MISSED"}${spread}`,
    );
  }
  lines.push(
    "",
    `${writes} requests per load at concurrency ${concurrency}; ${sequential} sequential writes for the counts and the delayed latency. ` +
      `Postgres: ${db.server}, ${pooled ? "pooled" : "direct"}, pipelined connect ${pipelined ? "on" : "off"}; Node ${process.version}, ${machine}; run took ${seconds.toFixed(0)} s.`,
  );
  return lines.join("\n");
}
