/**
 * One relay of the production-shaped phase's concurrent drain, in its own Node
 * process, as each Worker invocation has its own isolate: drains through
 * @neondatabase/serverless over the ws proxy and @upstash/qstash to the accept-only
 * endpoint, then prints one JSON line. Several run at once; each connects first and
 * starts its drain at `startAt` (a wall-clock time the parent chose), so connection
 * set-up is outside the timed drain. Spawned by child.ts; argv[2] is a
 * ProductionRelayInput.
 */
import { Pool } from "@neondatabase/serverless";
import { configureNeonForWsProxy } from "../../infra/ws-proxy.ts";
import { createQStashPublisher, drain, type Job, type Publisher } from "../../src/outbox/index.ts";
import type { ProductionRelayInput, ProductionRelayOutput } from "./child.ts";
import { processCpuMs } from "./process-cpu.ts";
import { PUBLIC_URL, benchSubscriptions } from "./subscriptions.ts";

const input = JSON.parse(process.argv[2]!) as ProductionRelayInput;
configureNeonForWsProxy({ address: input.proxyAddress }, input.pipelinedConnect);
const pool = new Pool({ connectionString: input.url, max: 1 });
pool.on("error", () => undefined);
const { rows } = await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
const backendPid = rows[0]!.pid;

const inner = createQStashPublisher({
  baseUrl: input.qstash.url,
  token: input.qstash.token,
  publicUrl: PUBLIC_URL,
});
// Every deduplication id this relay published, for the parent's duplicate count
// across relays.
const published: string[] = [];
const publisher: Publisher = {
  publish(jobs: Job[], signal) {
    for (const job of jobs) published.push(job.deduplicationId);
    return inner.publish(jobs, signal);
  },
};

const wait = input.startAt - Date.now();
if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
const lateMs = Math.max(0, Date.now() - input.startAt);
const backendBefore = processCpuMs(backendPid);
const cpuBefore = process.cpuUsage();
const started = performance.now();
const result = await drain({
  pool,
  publisher,
  subscriptions: benchSubscriptions,
  batchSize: input.batchSize,
  budgetMs: 30 * 60_000,
  until: "empty",
});
const ms = performance.now() - started;
const endedAt = Date.now();
const cpu = process.cpuUsage(cpuBefore);
const backendAfter = processCpuMs(backendPid);
await pool.end();
if (result.stoppedBecause !== "drained") throw new Error(`drain stopped: ${result.stoppedBecause}`);

const output: ProductionRelayOutput = {
  ms,
  endedAt,
  lateMs,
  fanned: result.fanned,
  passes: result.passes,
  cpuMs: (cpu.user + cpu.system) / 1000,
  ...(backendBefore === undefined || backendAfter === undefined
    ? {}
    : { backendCpuMs: backendAfter - backendBefore }),
  published,
};
process.stdout.write(`${JSON.stringify(output)}\n`);
