/**
 * `npx tsx bench/write-steps.ts [--reps <n>]`
 *
 * Postgres's CPU for each step of a write with its receipt (issue 11 item 7), one
 * step at a time on one connection: the backend's own CPU from /proc (Linux; the
 * server must run on this machine, as the embedded one or a local DATABASE_URL's
 * does), per repetition of the step, after a warm-up. Says which part of a write's
 * Postgres CPU is the API key check, the create, the relay pass that fans its event
 * out, and what `BEGIN`/`COMMIT` cost by themselves. CPU is counted in clock ticks
 * (10 ms), so use a few hundred repetitions or more.
 */
import { parseArgs } from "node:util";
import pg from "pg";
import { drizzle } from "drizzle-orm/node-postgres";
import { ensureDevApiKey, newDevApiKey } from "../infra/dev-api-key.ts";
import { authenticate } from "../src/domain/api-keys/keys.ts";
import { createNote } from "../src/domain/notes/create.ts";
import { subscriptions } from "../src/domain/subscriptions.ts";
import { createNullPublisher, runPass } from "../src/outbox/index.ts";
import { openBenchDatabase } from "./support/db.ts";
import { processCpuMs } from "./support/process-cpu.ts";

const { values } = parseArgs({ options: { reps: { type: "string", default: "500" } } });
const reps = Number(values.reps);
if (!Number.isInteger(reps) || reps < 1)
  throw new Error(`--reps must be a positive integer, got ${values.reps}`);

const db = await openBenchDatabase();
const key = newDevApiKey();
await ensureDevApiKey(db.url, key);
// One connection, so every step runs on the backend whose CPU is read.
const pool = new pg.Pool({ connectionString: db.url, max: 1 });
const d = drizzle(pool);
const pid = (await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
const publisher = createNullPublisher();
const note = () => createNote(d, { title: "a note", body: "a write and its receipt" });
const pass = () => runPass({ pool, publisher, subscriptions });

const steps: [string, () => Promise<unknown>][] = [
  ["SELECT 1", () => pool.query("SELECT 1")],
  [
    "/healthz's schema check",
    () => pool.query("SELECT max(created_at)::float8 AS newest FROM drizzle.__drizzle_migrations"),
  ],
  ["BEGIN; COMMIT", () => pool.query("BEGIN; COMMIT")],
  ["API key check", () => authenticate(d, key)],
  ["create (one round trip, ADR 0019)", note],
  ["create, then the pass that fans it out", () => note().then(pass)],
  ["a pass that claims nothing", pass],
];
try {
  if (processCpuMs(pid) === undefined)
    throw new Error(`/proc does not show backend ${pid}: run Postgres on this machine`);
  for (const [name, step] of steps) {
    for (let i = 0; i < Math.min(50, reps); i++) await step();
    const before = processCpuMs(pid)!;
    const started = performance.now();
    for (let i = 0; i < reps; i++) await step();
    const cpu = (processCpuMs(pid)! - before) / reps;
    const wall = (performance.now() - started) / reps;
    process.stdout.write(`${name.padEnd(42)} backend CPU ${cpu.toFixed(3)} ms, wall ${wall.toFixed(3)} ms\n`);
  }
} finally {
  await pool.end();
  await db.close();
}
