/**
 * The relay process: drains the backlog once in its own Node process, so its
 * timing and its memory are not mixed up with the benchmark's bookkeeping, then
 * prints one JSON line. Spawned by child.ts; argv[2] is a RelayProcessInput.
 */
import pg from "pg";
import type * as Outbox from "../../src/outbox/index.ts";
import { send, type SqlResult } from "../../src/outbox/sql.ts";
import { ceilingSql } from "./ceiling.ts";
import { processCpuMs } from "./process-cpu.ts";
import type { RelayProcessInput, RelayProcessOutput } from "./child.ts";
import { LABEL, PUBLIC_URL, benchSubscriptions } from "./subscriptions.ts";

const input = JSON.parse(process.argv[2]!) as RelayProcessInput;
const { createNullPublisher, createQStashPublisher, drain } = (await import(
  input.outbox ?? "../../src/outbox/index.ts"
)) as typeof Outbox;
// The ceiling's client keeps every column as the text the server sent. Its statement
// returns payload and created_at where the relay reads one text column (event_json),
// and pg's default parsers made a Date and a JSON object of each row's (postgres-date
// alone was ~70 ms of a 100,000-event ceiling drain in a profile): work the relay's
// client does not do, which slowed the ceiling and so flattered item 2.
const asText = { getTypeParser: () => (value: string) => value };
const pool = new pg.Pool({
  connectionString: input.url,
  max: 1,
  ...(input.mode === "ceiling" ? { types: asText } : {}),
});
// Connect before the clock starts: connection set-up is not a pass's cost. One
// connection (max 1), so one backend does all the drain's database work: its CPU
// time moves much less with other processes' load than wall time does.
const first = await pool.connect();
const backendPid = (await first.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
first.release();

const baseline = process.memoryUsage();
let peakRss = baseline.rss;
let peakHeap = baseline.heapUsed;
const sample = () => {
  const m = process.memoryUsage();
  peakRss = Math.max(peakRss, m.rss);
  peakHeap = Math.max(peakHeap, m.heapUsed);
};
// process.memoryUsage() reads /proc and walks V8's heap spaces: sampled every 5 ms it
// cost the relay ~5% of its time in a profile. Peak RSS comes from getrusage anyway.
const sampler = setInterval(sample, 50);

let events = 0;
let jobs = 0;
let passes = 0;
// A server on another machine: no figure (0) rather than a failed drain.
const backendCpu = () => processCpuMs(backendPid) ?? 0;
const backendBefore = backendCpu();
const cpuBefore = process.cpuUsage();
const started = performance.now();
if (input.mode === "ceiling") {
  const sql = ceilingSql(input.batchSize, input.table, input.counter);
  const client = await pool.connect();
  try {
    for (;;) {
      // As the relay sends (send(): the callback form, whose rows do not outlive a
      // young-generation collection), so the ceiling's client is not the slower one.
      const result = (await send(client, sql)) as SqlResult<unknown>;
      passes++;
      if (!result.rowCount) break;
      events += result.rowCount;
    }
  } finally {
    client.release();
  }
} else {
  const publisher: Outbox.Publisher =
    input.mode === "qstash"
      ? createQStashPublisher({
          baseUrl: input.qstash!.url,
          token: input.qstash!.token,
          publicUrl: PUBLIC_URL,
          // Ignored by a baseline's publisher from before labels: it sends what it sent.
          label: LABEL,
        })
      : createNullPublisher();
  const result = await drain({
    pool,
    publisher,
    subscriptions: benchSubscriptions,
    batchSize: input.batchSize,
    budgetMs: 30 * 60_000,
    until: "empty",
  });
  if (result.stoppedBecause !== "drained") throw new Error(`drain stopped: ${result.stoppedBecause}`);
  events = result.fanned;
  jobs = result.jobs;
  passes = result.passes;
}
const ms = performance.now() - started;
const cpu = process.cpuUsage(cpuBefore);
const backendCpuMs = backendCpu() - backendBefore;
clearInterval(sampler);
sample();
await pool.end();

const output: RelayProcessOutput = {
  ms,
  events,
  jobs,
  passes,
  baselineRssBytes: baseline.rss,
  peakRssBytes: Math.max(peakRss, process.resourceUsage().maxRSS * 1024),
  baselineHeapBytes: baseline.heapUsed,
  peakHeapBytes: peakHeap,
  cpuMicros: cpu.user + cpu.system,
  backendCpuMs,
};
process.stdout.write(`${JSON.stringify(output)}\n`);
