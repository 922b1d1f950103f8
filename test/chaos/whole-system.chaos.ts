import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/domain/api-keys/keys.ts";
import { subscriptions } from "../../src/domain/subscriptions.ts";
import { matchesGlob, matchesType } from "../../src/outbox/subscriptions.ts";
import { RELAY_POLICY } from "../../src/outbox/relay/policy.ts";
import {
  freePort,
  migrateDatabase,
  startEmbeddedPostgres,
  type EmbeddedServer,
} from "../../src/node/postgres.ts";
import type { TestDatabase } from "../support/db.ts";
import { backoffMs } from "../../infra/qstash-dev/retry-policy.ts";
import { isSettled } from "../../infra/qstash-dev/server.ts";
import { useWorkerd } from "../support/workerd.ts";
import { startPublishFaults, type PublishFaults } from "./publish-faults.ts";

// The whole system under faults: the Worker bundle in workerd, the Neon driver over
// the WebSocket proxy, the QStash dev server delivering to the Worker, the sink as
// the mail API, and a Postgres of its own (restarted mid-run, so never the shared one).
// Sizes come from the environment so a slower machine can scale down and say so.
// Three bounds end the write phase, whichever comes first: the event count
// (CHAOS_EVENTS, default 10,000, the figure), the time (CHAOS_WRITE_MS,
// default 180 s), and the backlog: every event is about two jobs QStash must deliver
// through the Worker before the verdict, and a machine that writes faster than it
// delivers must not give itself a backlog the 5-minute bound cannot drain (a CI run
// on a quiet machine once wrote 4,098 events in 40 s and timed out delivering them).
// So the writers stop once the jobs not yet delivered, at the delivery rate of the
// last 10 s, would end the run after FINISH_BY_MS. How many events a run carried, and
// which bound stopped it, are in the summary (ADR 0011 has the figures).
const TARGET_EVENTS = Number(process.env.CHAOS_EVENTS ?? 10_000);
const WRITERS = Number(process.env.CHAOS_WRITERS ?? 10);
const WRITE_PHASE_MS = Number(process.env.CHAOS_WRITE_MS ?? 180_000);
/** When the run should be done with delivery, leaving a minute of the 5 for a slow verdict. */
const FINISH_BY_MS = 240_000;
/** Time after the writers stop that is not delivery: settling, the outage, the final drain. */
const AFTER_WRITES_MS = 35_000;
const JOBS_PER_EVENT = 2;
/** How much faster delivery runs once the writers stop (measured, see the pacer). */
const AFTER_WRITES_SPEED_UP = 1.5;
const MIN_CUTS = 20;
// The transport outage, time-scaled: the relay's 1-minute backoff cap becomes 6 s
// (RELAY_BACKOFF_CAP_SECONDS), so the outage reaches its cap within seconds instead
// of the two minutes the doubling from 2 s to 60 s takes, and recovery waits 6 s, not 60.
const TIME_SCALE = 0.1;
// QStash's delays run at 1/100 here: a retry QStash would make in 1 s comes in 10 ms.
const QSTASH_TIME_SCALE = 0.01;
// How long a job can legitimately stay unsettled: QStash's default backoff (e^(2.5·n) s)
// puts a job's last retry e^10 s (about 6 h, 220 s here) after its fifth failure. A job
// whose attempts met the Postgres restart and then the mail API's 503s settles only
// then; a 2-minute wait once failed a run on exactly such a message.
const LAST_RETRY_MS =
  Array.from({ length: Math.max(...subscriptions.map((s) => s.retries ?? 3)) }, (_, n) =>
    backoffMs(n),
  ).reduce((a, b) => a + b) * QSTASH_TIME_SCALE;
const CAP_SECONDS = Math.round(RELAY_POLICY.passBackoff.capSeconds * TIME_SCALE);
// Webhook endpoints on the sink, each with its own event-type globs and path.
const ENDPOINTS = [
  { name: "suppliers", types: ["supplier.*"] },
  { name: "note-edits", types: ["corpus.note.changed"] },
] as const;

const repo = fileURLToPath(new URL("../../", import.meta.url));
const cliEntry = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

let server: EmbeddedServer | undefined;
let dataRoot = "";
let pgPort = 0;
let adminUrl = "";
let faults: PublishFaults | undefined;
let apiKey = "";
const pgLog: string[] = [];
const t = { url: "" } as TestDatabase;

beforeAll(async () => {
  // A persistent data directory so the restart keeps the data; its parent walkable for
  // the postgres user when running as root (see startEmbeddedPostgres).
  dataRoot = await mkdtemp(path.join(tmpdir(), "edge-outbox-chaos-"));
  await chmod(dataRoot, 0o755);
  await mkdir(path.join(dataRoot, "pg"));
  await chmod(path.join(dataRoot, "pg"), 0o755);
  pgPort = await freePort();
  server = await startPostgres();
  adminUrl = server.url;
  t.url = adminUrl;
  await migrateDatabase(adminUrl);
  // Every domain route takes a tenant's API key; the writers act in one scope.
  const keyPool = new pg.Pool({ connectionString: adminUrl, max: 1 });
  apiKey = (await createApiKey(drizzle(keyPool), { scope: "chaos", name: "chaos writers" })).key;
  await keyPool.end();
  faults = await startPublishFaults(() => stack.qstash.url);
}, 120_000);

async function startPostgres() {
  return startEmbeddedPostgres({
    dataDir: path.join(dataRoot, "pg", "data"),
    port: pgPort,
    log: (line) => {
      if (/too many clients|remaining connection slots/i.test(line)) pgLog.push(line);
    },
  });
}

// Spread at start-up, after the beforeAll above: the Worker and the CLI publish through the fault proxy.
const stack = useWorkerd(
  t,
  {
    get QSTASH_URL() {
      return faults!.url;
    },
    RELAY_BACKOFF_CAP_SECONDS: String(CAP_SECONDS),
    // At QStash's 1/100: a webhook answered 503 comes back within a second, however
    // often it failed, instead of after the production schedule's minutes.
    WEBHOOK_RETRY_SCHEDULE: "1,2,4,8,16,32,64,128",
  },
  { qstashTimeScale: QSTASH_TIME_SCALE },
);

afterAll(async () => {
  await faults?.close();
  await server?.stop().catch(() => undefined);
  if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
}, 60_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Counters {
  requests: number;
  writesOk: number;
  writesFailed: number;
  failedForConnections: number;
  failureSamples: string[];
  eventsAnswered: number;
  rolledBackTransitions: number;
  rolledBackSql: number;
  /** Keyed writes sent again after a failure (ADR 0035). */
  keyedResends: number;
  terminatedPasses: number;
  killedDrains: number;
  /** Of those, killed while their connection held a claim (idle in transaction). */
  killedDrainsMidPass: number;
  drainsStarted: number;
  sweeps: number;
  sweepsFailed: number;
  postgresRestarts: number;
  peakConnections: number;
  peakStarting: number;
  peakByState: Record<string, number>;
}

describe("chaos: the whole system under faults", () => {
  it("fans every committed event once per subscription, doubles nothing and drains after the faults", async () => {
    const c: Counters = {
      requests: 0,
      writesOk: 0,
      writesFailed: 0,
      failedForConnections: 0,
      failureSamples: [],
      eventsAnswered: 0,
      rolledBackTransitions: 0,
      rolledBackSql: 0,
      keyedResends: 0,
      terminatedPasses: 0,
      killedDrains: 0,
      killedDrainsMidPass: 0,
      drainsStarted: 0,
      sweeps: 0,
      sweepsFailed: 0,
      postgresRestarts: 0,
      peakConnections: 0,
      peakStarting: 0,
      peakByState: {},
    };
    const started = Date.now();
    let stopChaos = false;
    // Set by the backlog bound: the writers stop, the faults go on until enough passes were cut.
    let stopWriting = false;
    let restartedAt = 0;
    let stopAll = false;
    let pgDown = false;

    // One connection of our own for observing and for the faults that need SQL;
    // re-opened after the restart. Errors while Postgres is down are expected.
    let observer: pg.Client | undefined;
    const observe = async <R extends pg.QueryResultRow>(text: string, values: unknown[] = []) => {
      if (!observer) {
        const client = new pg.Client({ connectionString: adminUrl });
        client.on("error", () => undefined);
        await client.connect();
        observer = client;
      }
      try {
        return await observer.query<R>(text, values);
      } catch (error) {
        await observer.end().catch(() => undefined);
        observer = undefined;
        throw error;
      }
    };

    // Writes go straight to the Worker; its 5xx during the Postgres restart are expected
    // and counted, and each is checked for the one cause that must never happen.
    async function write(method: string, p: string, body: unknown, headers: Record<string, string> = {}) {
      c.requests++;
      try {
        const res = await stack.fetch(p, {
          method,
          headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}`, ...headers },
          body: JSON.stringify(body),
        });
        const text = await res.text();
        const json = text ? JSON.parse(text) : undefined;
        if (res.ok) {
          c.writesOk++;
          c.eventsAnswered += json?.events?.length ?? 0;
        } else if (res.status !== 409) {
          c.writesFailed++;
          if (
            /too many clients|connection slots|connection timeout|timeout exceeded when trying to connect|no server connection free/i.test(
              text,
            )
          )
            c.failedForConnections++;
          if (c.failureSamples.length < 5) c.failureSamples.push(`${res.status} ${p}: ${text.slice(0, 200)}`);
        }
        return { status: res.status, body: json };
      } catch (error) {
        c.writesFailed++;
        if (c.failureSamples.length < 5) c.failureSamples.push(`${p}: ${(error as Error).message}`);
        return { status: 0, body: undefined };
      }
    }

    // Creates and imports go as a client that retries does (ADR 0035): with an
    // Idempotency-Key, resent with it after a failure (cut off, or a 5xx while
    // Postgres restarts) until answered. Each of their titles must then exist once.
    const keyed: { titles: string[]; answered: boolean }[] = [];
    async function writeWithKey(p: string, body: unknown, titles: string[]) {
      const key = crypto.randomUUID();
      let res = await write("POST", p, body, { "idempotency-key": key });
      for (let resend = 0; (res.status === 0 || res.status >= 500) && resend < 120 && !stopAll; resend++) {
        c.keyedResends++;
        await sleep(250 + Math.random() * 250);
        res = await write("POST", p, body, { "idempotency-key": key });
      }
      keyed.push({ titles, answered: res.status >= 200 && res.status < 300 });
      return res;
    }

    const rolledBackSubjects: string[] = [];
    async function writer(w: number) {
      for (let i = 0; i < 100_000 && !stopChaos && !stopWriting && c.eventsAnswered < TARGET_EVENTS; i++) {
        const roll = Math.random();
        if (roll < 0.45) {
          const notes = Array.from({ length: 25 }, (_, k) => ({
            title: `w${w} import ${i}.${k}`,
            body: "chaos",
          }));
          await writeWithKey(
            "/notes/import",
            { notes },
            notes.map((n) => n.title),
          );
        } else if (roll < 0.7) {
          const title = `w${w} note ${i}`;
          const created = await writeWithKey("/notes", { title, body: "v1" }, [title]);
          const id = created.body?.note?.id;
          // Two quick edits of one note: the coalescing subscriber may see only the last.
          if (id) for (const v of [2, 3]) await write("PATCH", `/notes/${id}`, { body: `v${v}` });
        } else if (roll < 0.93) {
          const created = await write("POST", "/suppliers", { name: `Supplier w${w}-${i}` });
          const id = created.body?.supplier?.id;
          if (!id) continue;
          // Activating before connecting is illegal: its transaction aborts with a 409.
          const early = await write("POST", `/suppliers/${id}/activate`, {});
          if (early.status === 409) c.rolledBackTransitions++;
          await write("POST", `/suppliers/${id}/connect`, {});
          await write("POST", `/suppliers/${id}/activate`, {});
        } else {
          // An event recorded in a transaction that is then rolled back, through SQL.
          const subject = `chaos-rolled-back-${w}-${i}`;
          try {
            await observeTx(subject);
            rolledBackSubjects.push(subject);
            c.rolledBackSql++;
          } catch {
            // Postgres restarting: that rollback simply did not happen.
          }
        }
      }
    }
    async function observeTx(subject: string) {
      const client = new pg.Client({ connectionString: adminUrl });
      client.on("error", () => undefined);
      await client.connect();
      try {
        await client.query("BEGIN");
        await client.query(
          `INSERT INTO events (type, subject, payload) VALUES ('chaos.rolled-back', $1, '{}')`,
          [subject],
        );
        await client.query("ROLLBACK");
      } finally {
        await client.end().catch(() => undefined);
      }
    }

    // Sampling: every client backend on this server, by state (`starting` = still authenticating).
    const sampler = (async () => {
      while (!stopAll) {
        try {
          const { rows } = await observe<{ state: string; n: number }>(
            `SELECT coalesce(state, 'starting') AS state, count(*)::int AS n FROM pg_stat_activity
                WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1`,
          );
          let total = 0;
          for (const r of rows) {
            total += r.n;
            c.peakByState[r.state] = Math.max(c.peakByState[r.state] ?? 0, r.n);
          }
          c.peakConnections = Math.max(c.peakConnections, total);
          c.peakStarting = Math.max(c.peakStarting, c.peakByState.starting ?? 0);
        } catch {
          // down during the restart
        }
        await sleep(250);
      }
    })();

    // A progress line every 5 s, straight to stderr (vitest holds a running test's console).
    let phase = "writing";
    const progress = (async () => {
      while (!stopAll) {
        await sleep(5_000);
        const pendingNow = await observe<{ n: number }>(
          `SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL`,
        ).catch(() => null);
        const open = stack.qstash.messages().filter((m) => !isSettled(m.state));
        process.stderr.write(
          `chaos ${Math.round((Date.now() - started) / 1000)}s ${phase}: answered ${c.eventsAnswered} events, ` +
            `pending ${pendingNow?.rows[0]?.n ?? "?"}, qstash unsettled ${open.length}, cuts ${c.terminatedPasses}, ` +
            `restarts ${c.postgresRestarts}, peak connections ${c.peakConnections} ${JSON.stringify(c.peakByState)}\n`,
        );
      }
    })();

    // Cron sweeps, one after another, for the whole run.
    const sweeper = (async () => {
      while (!stopAll) {
        c.sweeps++;
        const res = await stack.fetch("/__scheduled?cron=*+*+*+*+*").catch(() => null);
        if (!res?.ok) c.sweepsFailed++;
        await res?.text().catch(() => undefined);
        await sleep(1_000);
      }
    })();

    // CLI drains in their own processes, most killed partway.
    const children = new Set<ChildProcess>();
    function cliDrain(kill: boolean): Promise<number | null> {
      c.drainsStarted++;
      // Named, so the kill below can find its connection in pg_stat_activity.
      const name = `chaos-drain-${c.drainsStarted}`;
      const child = spawn(
        process.execPath,
        ["--import", "tsx", cliEntry, "relay", "drain", "--budget", "60"],
        {
          cwd: repo,
          env: {
            PATH: process.env.PATH ?? "",
            DATABASE_URL: `${adminUrl}${adminUrl.includes("?") ? "&" : "?"}application_name=${name}`,
            QSTASH_URL: faults!.url,
            QSTASH_TOKEN: stack.env.QSTASH_TOKEN!,
            PUBLIC_URL: stack.url,
            RELAY_BACKOFF_CAP_SECONDS: String(CAP_SECONDS),
          },
          stdio: "ignore",
        },
      );
      children.add(child);
      const exited = new Promise<number | null>((resolve) =>
        child.on("exit", (code) => {
          children.delete(child);
          resolve(code);
        }),
      );
      if (kill) {
        // The process dies mid-pass: once its connection holds a claim and waits on the
        // publish (idle in transaction), or after 5 s whatever it is doing. A timer
        // alone (1.2–2.7 s) killed no drain in a run on a quiet machine: each found
        // nothing to claim and had exited in 0.7 s.
        void (async () => {
          const deadline = Date.now() + 5_000;
          let midPass = false;
          while (!midPass && child.exitCode === null && Date.now() < deadline) {
            await sleep(20);
            try {
              const { rows } = await observe<{ state: string }>(
                `SELECT state FROM pg_stat_activity WHERE application_name = $1`,
                [name],
              );
              midPass = rows[0]?.state === "idle in transaction";
            } catch {
              // down during the restart
            }
          }
          if (child.exitCode === null && child.kill("SIGKILL")) {
            c.killedDrains++;
            if (midPass) c.killedDrainsMidPass++;
          }
        })();
      }
      return exited;
    }
    // One drain every few seconds, not back to back: each costs about a second of CPU to
    // start (Node and tsx), which back to back took a third of a core from delivery
    // for the whole write phase; the terminator cuts far more passes than the drains.
    // Not only when there is a backlog: gated on one, 2–3 drains ran a run instead of
    // about 8, and with them fewer passes for the terminator to cut (18–46 in CI
    // against 52 before, once under MIN_CUTS).
    const drainer = (async () => {
      while (!stopChaos) {
        await cliDrain(true);
        await sleep(4_000);
      }
    })();

    // Passes cut between publish and commit: a relay backend idle in its claim
    // transaction is waiting on its publish. Terminating it rolls the pass back
    // after QStash has (perhaps) accepted its jobs. The claim is known by its relay
    // state read, which opens its text: pg_stat_activity keeps only the first
    // track_activity_query_size bytes (1 KB by default), and the claim's FOR UPDATE
    // SKIP LOCKED now ends past them (ADR 0024's condition comes before it).
    const terminator = (async () => {
      while (!stopChaos) {
        await sleep(300 + Math.random() * 400);
        if (pgDown) continue;
        try {
          const { rows } = await observe<{ ok: boolean }>(
            `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
                WHERE state = 'idle in transaction' AND query LIKE '%BEGIN;%SELECT failures, backoff_until,%'
                ORDER BY random() LIMIT 1`,
          );
          if (rows[0]?.ok) c.terminatedPasses++;
        } catch {
          // down during the restart
        }
      }
    })();

    // Faults on: 10 % of publishes fail (5xx and timeouts); a little latency widens
    // the publish-to-commit window; the mail API answers 503 to 10 % of sends.
    faults!.set({ serverErrorRate: 0.08, timeoutRate: 0.02, latencyMs: 150 });
    // Webhook endpoints answer 503 to 10 % of deliveries too: QStash retries them.
    let mail503 = 0;
    let webhook503 = 0;
    const failSome = (r: { path: string; n: number }) => {
      const webhook = r.path.startsWith("/hooks/");
      if ((webhook || r.path === "/mail") && Math.random() < 0.1) {
        if (webhook) webhook503++;
        else mail503++;
        return { status: 503, body: { error: "chaos: receiver unavailable" } };
      }
      return { status: 200, body: { id: `sink-${r.n}` } };
    };
    stack.sink.respondWith(failSome);

    // The endpoints are registered once Postgres is back from its restart, and
    // events from then on are checked for delivery (an event committed earlier may
    // or may not have met them at its fan-out). Before that, a delivery whose
    // recording the restart cut would keep its lease for LEASE_SECONDS of real time
    // while the time-scaled QStash spent all its retries on "busy" answers in a
    // second or two: an artefact of the scaling (in production the first busy
    // answer waits the lease out), not a fault of the system.
    const endpoints: { id: string; name: string; types: readonly string[]; path: string }[] = [];
    async function createEndpoints() {
      for (const e of ENDPOINTS) {
        const path = `/hooks/${e.name}`;
        for (let attempt = 0; attempt < 20; attempt++) {
          const res = await stack
            .fetch("/admin/webhooks/endpoints", {
              method: "POST",
              headers: {
                "content-type": "application/json",
                authorization: `Bearer ${stack.env.ADMIN_TOKEN}`,
              },
              body: JSON.stringify({ url: `${stack.sink.url}${path}`, scope: "chaos", types: e.types }),
            })
            .catch(() => null);
          const body = res
            ? ((await res.json().catch(() => null)) as { endpoint?: { id: string } } | null)
            : null;
          if (res?.status === 201 && body?.endpoint) {
            endpoints.push({ id: body.endpoint.id, name: e.name, types: e.types, path });
            break;
          }
          await sleep(250);
        }
      }
    }

    // Postgres restarted once, when the writers are well under way (by count or by time).
    const restarter = (async () => {
      // Early enough that the backlog bound (which waits for it) never ends the writes first.
      const at = Date.now() + Math.min(WRITE_PHASE_MS * 0.4, 25_000);
      for (
        let i = 0;
        i < 1_200 && !stopChaos && c.eventsAnswered < TARGET_EVENTS * 0.4 && Date.now() < at;
        i++
      )
        await sleep(100);
      if (stopChaos) return;
      pgDown = true;
      await server!.stop();
      await sleep(1_500);
      server = await startPostgres();
      pgDown = false;
      c.postgresRestarts++;
      restartedAt = Date.now();
      await createEndpoints();
    })();

    let writesEndedBy: "count" | "time" | "backlog" = "count";
    const writeDeadline = setTimeout(() => {
      if (!stopChaos) writesEndedBy = "time";
      stopChaos = true;
    }, WRITE_PHASE_MS);
    // The backlog bound: jobs QStash still holds plus those the pending events will
    // make, at the delivery rate of the last 30 s, measured only from 15 s after the
    // Postgres restart, whose stall would make any rate look hopeless. While writers
    // compete for the CPU delivery runs at about half its rate after (2026-12-03:
    // 25–40 jobs/s against 48–70), hence the 1.5: the estimate still errs early.
    const delivered: { at: number; n: number }[] = [];
    const pacer = (async () => {
      while (!stopChaos && !stopWriting) {
        await sleep(2_000);
        const messages = stack.qstash.messages();
        const now = Date.now();
        delivered.push({ at: now, n: messages.filter((m) => m.state === "DELIVERED").length });
        while (delivered.length > 1 && delivered[0]!.at < now - 30_000) delivered.shift();
        const first = delivered[0]!;
        if (restartedAt === 0 || now - restartedAt < 15_000 || now - first.at < 10_000) continue;
        const rate = Math.max(1, ((delivered.at(-1)!.n - first.n) * 1000) / (now - first.at));
        const pendingNow = await observe<{ n: number }>(
          `SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL`,
        ).catch(() => null);
        if (!pendingNow) continue;
        const unsettledJobs = messages.filter((m) => !isSettled(m.state)).length;
        const backlog = unsettledJobs + pendingNow.rows[0]!.n * JOBS_PER_EVENT;
        const finishAt = now - started + (backlog / (rate * AFTER_WRITES_SPEED_UP)) * 1000 + AFTER_WRITES_MS;
        if (finishAt > FINISH_BY_MS && !stopChaos && !stopWriting) {
          writesEndedBy = "backlog";
          stopWriting = true;
        }
      }
    })();
    await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
    // Keep cutting passes until enough were cut (bounded by the write phase's deadline),
    // one writer still writing so that there are passes to cut: on a quiet machine the
    // events were all written with 18 passes cut, and then the sweeps found nothing.
    const feeder = (async () => {
      for (let i = 0; !stopChaos && !stopWriting && c.terminatedPasses < MIN_CUTS; i++) {
        await write("POST", "/notes", { title: `cut feeder ${i}`, body: "chaos" });
      }
    })();
    for (let i = 0; i < 300 && !stopChaos && c.terminatedPasses < MIN_CUTS; i++) await sleep(100);
    stopChaos = true;
    await feeder;
    clearTimeout(writeDeadline);
    await Promise.all([drainer, terminator, restarter, pacer]);
    const writePhaseMs = Date.now() - started;

    // The outage: every publish refused until the relay's backoff, recorded by a
    // failure inside the outage, reaches its (time-scaled) cap. Rows charged with
    // an attempt or poisoned are counted before and after: an outage charges none.
    const relayState = () =>
      observe<{ failures: number; wait: number | null; failed_at: Date | null; charged: number }>(
        `SELECT failures, extract(epoch FROM backoff_until - last_failure_at)::float AS wait,
                last_failure_at AS failed_at,
                (SELECT count(*)::int FROM events WHERE attempts > 0 OR poisoned_at IS NOT NULL) AS charged
           FROM outbox_relay_state WHERE id = 1`,
      ).then((r) => r.rows[0]!);
    // One writer goes on through the outage, as users would: without pending rows no
    // pass publishes, and the backoff never moves. Before the outage the random faults
    // stop until a pass succeeds, so the outage climbs the backoff from its first step.
    let trickling = true;
    const trickle = (async () => {
      for (let i = 0; trickling; i++) {
        await write("POST", "/notes", { title: `outage note ${i}`, body: "written during the outage" });
        await sleep(300);
      }
    })();
    faults!.set({ serverErrorRate: 0, timeoutRate: 0 });
    phase = "settling";
    let beforeOutage = await relayState();
    for (let i = 0; i < 240 && beforeOutage.failures > 0; i++) {
      await sleep(250);
      beforeOutage = await relayState().catch(() => beforeOutage);
    }
    const { rows: dbClock } = await observe<{ now: Date }>(`SELECT now() AS now`);
    faults!.set({ down: true });
    phase = "outage";
    const outageStarted = Date.now();
    // Concurrent passes that fail together each double the wait, so with a backlog the
    // cap comes within a second; the outage then holds until a pass that waited the
    // capped backoff out is refused too (one more failure), as a long outage would.
    let reachedCap = false;
    let failuresAtCap: number | undefined;
    const outageWaits: number[] = [];
    let afterOutage = beforeOutage;
    for (let i = 0; i < 1_200; i++) {
      await sleep(250);
      afterOutage = await relayState().catch(() => afterOutage);
      const inOutage = afterOutage.failed_at !== null && afterOutage.failed_at >= dbClock[0]!.now;
      if (!inOutage || afterOutage.wait === null) continue;
      if (outageWaits.at(-1) !== afterOutage.wait) outageWaits.push(afterOutage.wait);
      reachedCap = afterOutage.wait >= CAP_SECONDS;
      if (reachedCap) failuresAtCap ??= afterOutage.failures;
      if (failuresAtCap !== undefined && afterOutage.failures > failuresAtCap) break;
    }
    const heldAtCap = failuresAtCap !== undefined && afterOutage.failures > failuresAtCap;
    faults!.set({ down: false, latencyMs: 0 });
    trickling = false;
    await trickle;
    const outageMs = Date.now() - outageStarted;
    // The last fault of the transport and the database; receivers go on failing 10 %
    // until every message has settled, as deliveries lag the writes by a minute or more.
    const lastFaultAt = Date.now();
    const proxyAtRecovery = stack.proxy.stats();
    phase = "recovery";
    expect(reachedCap, `the outage reached the ${CAP_SECONDS}-s backoff cap (waits ${outageWaits})`).toBe(
      true,
    );
    expect(heldAtCap, "a pass after the capped wait was refused too").toBe(true);
    expect(afterOutage.wait, "the backoff after the capped wait").toBe(CAP_SECONDS);
    expect(beforeOutage.failures, "the relay recovered from the random faults before the outage").toBe(0);
    // From no failure, doubling from 2 s reaches the cap at failure ceil(log2(cap / 2)) + 1 (2, 4, 6: the 3rd).
    const stepsToCap = Math.ceil(Math.log2(CAP_SECONDS / RELAY_POLICY.passBackoff.baseSeconds)) + 1;
    expect(afterOutage.failures, "failures the outage recorded on its way to the cap").toBeGreaterThanOrEqual(
      stepsToCap,
    );
    expect(afterOutage.charged, "rows charged or poisoned during the outage").toBe(beforeOutage.charged);

    // Recovery: the sweeps go on; once the backoff has lapsed and nothing is pending,
    // a final CLI drain must find nothing, and every QStash message must settle.
    let pending = -1;
    for (let i = 0; i < 240; i++) {
      const { rows } = await observe<{ n: number }>(
        `SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL`,
      );
      pending = rows[0]!.n;
      if (pending === 0) break;
      await sleep(1_000);
    }
    expect(pending, "events still pending after the sweeps").toBe(0);
    const finalDrain = await cliDrain(false);
    expect(finalDrain).toBe(0);
    // Checked twice a second rather than by the dev server's waitFor, which copies
    // every message on every change: with 20,000 messages that alone took minutes of CPU.
    const unsettledNow = () => stack.qstash.messages().filter((m) => !isSettled(m.state));
    const settleBy = Date.now() + LAST_RETRY_MS + 60_000;
    let unsettled = unsettledNow();
    while (unsettled.length > 0 && Date.now() < settleBy) {
      await sleep(500);
      unsettled = unsettledNow();
    }
    // What is stuck, for whoever reads the failure: its route, state, retries and attempts.
    for (const m of unsettled)
      console.error(
        "unsettled:",
        JSON.stringify({
          id: m.messageId,
          kind: m.kind,
          url: m.url,
          state: m.state,
          retried: m.retried,
          maxRetries: m.maxRetries,
          flowControlKey: m.flowControlKey,
          ageSeconds: Math.round((Date.now() - m.createdAt) / 1000),
          attempts: m.attempts.slice(-3),
          body: m.body.slice(0, 300),
        }),
      );
    expect(
      unsettled.length,
      `QStash messages not settled ${Math.round((LAST_RETRY_MS + 60_000) / 1000)} s after the sweeps drained`,
    ).toBe(0);
    const drainedMs = Date.now() - lastFaultAt;
    stack.sink.respondWith(null);
    const proxyAtEnd = stack.proxy.stats();
    stopAll = true;
    await Promise.all([sweeper, sampler, progress]);

    // ---- Verdicts -------------------------------------------------------------
    const { rows: events } = await observe<{
      id: string;
      type: string;
      subject: string;
      scope: string | null;
      created_at: Date;
      fanout: Record<string, { messageId?: string; coalescedInto?: string }> | null;
      poisoned: boolean;
      pending: boolean;
    }>(
      `SELECT id, type, subject, scope, created_at, fanout, poisoned_at IS NOT NULL AS poisoned,
                (fanned_out_at IS NULL AND poisoned_at IS NULL) AS pending FROM events`,
    );
    const byId = new Map(events.map((e) => [e.id, e]));
    // The dev server keeps each accepted job's body: its event and subscription are the
    // deduplication id the relay sent (`<event id>:<subscription>`, relay/plan.ts).
    // webhook.deliver jobs are checked below, from the deliveries they carry.
    const allMessages = stack.qstash.messages();
    const isDeliverJob = (m: { url: string }) => m.url.endsWith("/jobs/webhook.deliver");
    // The sweep's canaries (ADR 0045) carry no event: they are no subscriber's job.
    const isCanary = (m: { url: string }) => m.url.endsWith("/jobs/_canary");
    const published = allMessages
      .filter((m) => m.kind === "publish" && !isDeliverJob(m) && !isCanary(m))
      .map((m) => {
        const job = JSON.parse(m.body) as { subscription: string; event: { id: string } };
        return { ...m, eventId: job.event.id, deduplicationId: `${job.event.id}:${job.subscription}` };
      });
    const byDedup = new Map<string, typeof published>();
    for (const m of published) byDedup.set(m.deduplicationId, [...(byDedup.get(m.deduplicationId) ?? []), m]);
    const byMessageId = new Map(published.map((m) => [m.messageId, m]));

    let jobs = 0;
    let lost = 0;
    let doubled = 0;
    let unhandled = 0;
    const lostSamples: string[] = [];
    for (const list of byDedup.values()) if (list.length > 1) doubled += list.length - 1;
    for (const e of events) {
      for (const sub of subscriptions) {
        if (!matchesType(sub, e.type)) continue;
        jobs++;
        const entry = e.fanout?.[sub.name];
        let messageId = entry?.messageId;
        if (entry?.coalescedInto) messageId = byId.get(entry.coalescedInto)?.fanout?.[sub.name]?.messageId;
        const message = messageId ? byMessageId.get(messageId) : undefined;
        const owner = entry?.coalescedInto ?? e.id;
        if (!message || message.deduplicationId !== `${owner}:${sub.name}`) {
          lost++;
          if (lostSamples.length < 5) lostSamples.push(`${e.id} ${sub.name} ${JSON.stringify(entry)}`);
          continue;
        }
        if (message.state !== "DELIVERED") unhandled++;
      }
    }
    // No message for an event that does not exist: a rolled-back write leaked nothing.
    const orphanMessages = published.filter((m) => !byId.has(m.eventId)).length;
    const { rows: leaked } = await observe<{ n: number }>(
      `SELECT count(*)::int AS n FROM events WHERE type = 'chaos.rolled-back'`,
    );
    const { rows: doubleActivations } = await observe<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT subject FROM events WHERE type = 'supplier.activated'
           GROUP BY subject HAVING count(*) > 1) d`,
    );
    // Side effects: one sent mail per supplier event, and the mail API accepted each key once.
    const supplierEvents = events.filter((e) => e.type.startsWith("supplier."));
    const { rows: mailRows } = await observe<{ sent: number; rows: number }>(
      `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL)::int AS sent, count(*)::int AS rows FROM mail_sends`,
    );
    const accepted = new Map<string, number>();
    for (const r of stack.sink.received({ path: "/mail" })) {
      if (r.status !== 200) continue;
      const key = r.headers["idempotency-key"] ?? "";
      accepted.set(key, (accepted.get(key) ?? 0) + 1);
    }
    const mailsDoubled = [...accepted.values()].filter((n) => n > 1).length;
    const mailsMissing = supplierEvents.filter((e) => !accepted.has(`notify.mail:${e.id}`)).length;

    // Webhooks: every event of the writers' scope committed once the endpoints existed,
    // of a type an endpoint takes, has one delivery row for it, delivered, whose POST
    // the sink answered 2xx; no delivery row recorded two successful attempts. A POST
    // resent after its recording was cut (sink saw the webhook-id twice) is the
    // receiver's to drop by webhook-id (Standard Webhooks): reported, not failed.
    const { rows: endpointRows } = await observe<{ id: string; created_at: Date }>(
      `SELECT id, created_at FROM webhook_endpoints`,
    );
    const { rows: deliveryRows } = await observe<{
      endpoint_id: string;
      event_id: string;
      status: string;
      attempts: number;
      succeeded: number;
    }>(
      `SELECT d.endpoint_id, d.event_id, d.status, d.attempts,
              (SELECT count(*)::int FROM webhook_attempts a
                WHERE a.delivery_id = d.id AND a.status BETWEEN 200 AND 299) AS succeeded
         FROM webhook_deliveries d`,
    );
    const deliveryOf = new Map(deliveryRows.map((d) => [`${d.event_id}:${d.endpoint_id}`, d]));
    const sinkAccepted = new Map<string, number>();
    let webhookPosts = 0;
    for (const r of stack.sink.received()) {
      if (!r.path.startsWith("/hooks/")) continue;
      webhookPosts++;
      if (r.status < 200 || r.status > 299) continue;
      const key = `${r.headers["webhook-id"] ?? ""}:${r.path}`;
      sinkAccepted.set(key, (sinkAccepted.get(key) ?? 0) + 1);
    }
    const webhook = {
      endpoints: endpoints.length,
      expected: 0,
      delivered: 0,
      missing: 0,
      notDelivered: 0,
      succeededTwiceInDb: deliveryRows.filter((d) => d.succeeded > 1).length,
      deliveredWithoutSuccessfulAttempt: deliveryRows.filter(
        (d) => d.status === "delivered" && d.succeeded !== 1,
      ).length,
      sinkMissing: 0,
      sinkResentSameWebhookId: [...sinkAccepted.values()].filter((n) => n > 1).length,
      receiver503: webhook503,
      posts: webhookPosts,
      retriedDeliveries: deliveryRows.filter((d) => d.attempts > 1).length,
    };
    const webhookSamples: string[] = [];
    const expectedPerEndpoint: Record<string, number> = {};
    const deliveryJobs = allMessages.filter((m) => m.kind === "publish" && isDeliverJob(m));
    const deliveryJobsNotDelivered = deliveryJobs.filter((m) => m.state !== "DELIVERED").length;
    for (const d of deliveryRows) {
      if (d.status !== "delivered") webhook.notDelivered++;
      const path = endpoints.find((e) => e.id === d.endpoint_id)?.path;
      if (d.status === "delivered" && !sinkAccepted.has(`${d.event_id}:${path}`)) webhook.sinkMissing++;
    }
    for (const endpoint of endpoints) {
      const since = endpointRows.find((r) => r.id === endpoint.id)!.created_at;
      for (const e of events) {
        if (
          e.scope !== "chaos" ||
          e.created_at < since ||
          !endpoint.types.some((glob) => matchesGlob(glob, e.type))
        )
          continue;
        webhook.expected++;
        expectedPerEndpoint[endpoint.name] = (expectedPerEndpoint[endpoint.name] ?? 0) + 1;
        const d = deliveryOf.get(`${e.id}:${endpoint.id}`);
        if (d?.status === "delivered") webhook.delivered++;
        else {
          webhook.missing++;
          if (webhookSamples.length < 5)
            webhookSamples.push(`${e.id} ${e.type} → ${endpoint.name}: ${d?.status}`);
        }
      }
    }

    // Every keyed write's notes, by title: once each when answered, never twice.
    const { rows: keyedCounts } = await observe<{ title: string; n: number }>(
      "SELECT title, count(*)::int AS n FROM corpus_notes WHERE title = ANY($1) GROUP BY title",
      [keyed.flatMap((k) => k.titles)],
    );
    const notesTitled = new Map(keyedCounts.map((r) => [r.title, r.n]));
    const keyedWrites = {
      sent: keyed.length,
      resends: c.keyedResends,
      unanswered: keyed.filter((k) => !k.answered).length,
      notesDoubled: keyedCounts.filter((r) => r.n > 1).length,
      notesMissing: keyed
        .filter((k) => k.answered)
        .flatMap((k) => k.titles)
        .filter((title) => notesTitled.get(title) !== 1).length,
    };

    const poisoned = events.filter((e) => e.poisoned).length;
    const stillPending = events.filter((e) => e.pending).length;
    await observer?.end().catch(() => undefined);
    for (const child of children) child.kill("SIGKILL");

    const publish = faults!.counts();
    const summary = {
      events: events.length,
      targetEvents: TARGET_EVENTS,
      writers: WRITERS,
      writeRequests: c.requests,
      writesFailed: c.writesFailed,
      writesFailedForConnections: c.failedForConnections + pgLog.length,
      rolledBackWrites: c.rolledBackTransitions + c.rolledBackSql,
      keyedWrites,
      jobs,
      qstashMessages: published.length,
      faults: {
        publishRequests: publish.publishes,
        publish5xx: publish.serverErrors,
        publishTimeouts: publish.timeouts,
        publishFailedShare: Number(
          (
            (publish.serverErrors + publish.timeouts) /
            Math.max(1, publish.publishes - publish.outageRefusals)
          ).toFixed(3),
        ),
        passesCutByTerminate: c.terminatedPasses,
        drainsKilled: c.killedDrains,
        drainsKilledMidPass: c.killedDrainsMidPass,
        mailApi503: mail503,
        webhookReceiver503: webhook503,
        outageSeconds: Math.round(outageMs / 1000),
        outageRefusedPublishes: publish.outageRefusals,
        relayFailuresInOutage: afterOutage.failures - beforeOutage.failures,
        postgresRestarts: c.postgresRestarts,
      },
      passes: { cronSweeps: c.sweeps, cronSweepsFailed: c.sweepsFailed, cliDrains: c.drainsStarted },
      lost,
      doubled,
      unhandled,
      orphanMessages,
      poisoned,
      pending: stillPending,
      mails: {
        supplierEvents: supplierEvents.length,
        sent: mailRows[0]!.sent,
        missing: mailsMissing,
        resentWithSameIdempotencyKey: mailsDoubled,
      },
      webhooks: {
        ...webhook,
        expectedPerEndpoint,
        deliverJobs: deliveryJobs.length,
        deliverJobsNotDelivered: deliveryJobsNotDelivered,
      },
      outage: {
        capSeconds: CAP_SECONDS,
        reachedCap,
        heldAtCap,
        relayFailuresBefore: beforeOutage.failures,
        relayFailuresAfter: afterOutage.failures,
        waitsSeconds: outageWaits.join(" "),
        rowsChargedDuring: afterOutage.charged - beforeOutage.charged,
      },
      delivery: deliveryFigures(allMessages),
      // Recovery alone: only QStash deliveries, sweeps and the sampler use the database.
      recovery: recoveryFigures(allMessages, lastFaultAt, proxyAtRecovery, proxyAtEnd),
      writePhaseSeconds: Math.round(writePhaseMs / 1000),
      writesEndedBy,
      drainAfterLastFaultSeconds: Math.round(drainedMs / 1000),
      connections: { peak: c.peakConnections, peakStarting: c.peakStarting },
      // The Worker's connections go through the pooler (Neon's pooled endpoint locally):
      // clients it answered against the backends it actually started.
      pooler: stack.proxy.stats().pool,
      peakConnectionsByState: c.peakByState,
      maxConnections: 100,
      totalSeconds: Math.round((Date.now() - started) / 1000),
    };
    await mkdir(path.join(repo, "reports"), { recursive: true });
    await writeFile(
      path.join(repo, "reports", "chaos-summary.json"),
      JSON.stringify(summary, null, 2) + "\n",
    );
    printSummary(summary);
    if (lostSamples.length) console.log("lost, for example:", lostSamples);
    if (c.failureSamples.length) console.log("failed writes, for example:", c.failureSamples);
    if (webhookSamples.length) console.log("webhooks not delivered, for example:", webhookSamples);

    expect(lost, "lost (event, subscription) pairs").toBe(0);
    expect(doubled, "deduplication ids accepted more than once").toBe(0);
    expect(orphanMessages, "messages for events that were never committed").toBe(0);
    expect(leaked[0]!.n, "events of rolled-back transactions").toBe(0);
    expect(doubleActivations[0]!.n, "suppliers activated twice").toBe(0);
    expect(keyedWrites.notesDoubled, "notes of a write resent with its Idempotency-Key, landed twice").toBe(
      0,
    );
    expect(keyedWrites.notesMissing, "notes of an answered keyed write that are not there").toBe(0);
    expect(keyedWrites.unanswered, "keyed writes never answered, though resent").toBe(0);
    expect(unhandled, "jobs not delivered to their subscriber").toBe(0);
    expect(mailRows[0]).toEqual({ sent: supplierEvents.length, rows: supplierEvents.length });
    expect(mailsMissing).toBe(0);
    // A resend with the same Idempotency-Key is the one window mail_sends cannot close (the
    // provider accepted, the commit was cut): the provider drops it (send-once.ts). Reported, not failed.
    expect(endpoints.length, "webhook endpoints registered after the restart").toBe(ENDPOINTS.length);
    for (const e of ENDPOINTS)
      expect(expectedPerEndpoint[e.name] ?? 0, `events that matched endpoint ${e.name}`).toBeGreaterThan(0);
    expect(webhook.missing, "(event, endpoint) pairs not delivered").toBe(0);
    expect(webhook.delivered).toBe(webhook.expected);
    expect(webhook.notDelivered, "webhook deliveries pending or failed").toBe(0);
    expect(webhook.succeededTwiceInDb, "(event, endpoint) recorded as delivered twice").toBe(0);
    expect(webhook.deliveredWithoutSuccessfulAttempt).toBe(0);
    expect(webhook.sinkMissing, "deliveries recorded but never accepted by the receiver").toBe(0);
    expect(deliveryJobsNotDelivered, "webhook.deliver jobs QStash gave up on").toBe(0);
    expect(webhook503, "the receiver failed some webhook deliveries").toBeGreaterThan(0);
    expect(poisoned, "events poisoned by the outage").toBe(0);
    expect(stillPending).toBe(0);
    expect(summary.writesFailedForConnections, "writes refused for lack of a connection").toBe(0);
    expect(c.terminatedPasses).toBeGreaterThanOrEqual(MIN_CUTS);
    expect(c.postgresRestarts).toBe(1);
    expect(c.rolledBackTransitions + c.rolledBackSql).toBeGreaterThan(0);
    // The run itself takes 1.5–3 minutes; the settle wait above may add up to ~5.
  }, 600_000);
});

function printSummary(s: Record<string, unknown>) {
  const rows: [string, string][] = [];
  const walk = (prefix: string, value: unknown) => {
    if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) walk(prefix ? `${prefix}.${k}` : k, v);
    } else rows.push([prefix, String(value)]);
  };
  walk("", s);
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log(["chaos summary", ...rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`)].join("\n"));
}

/** How fast QStash got jobs through the Worker: delivered jobs over the span of all attempts, and attempt times. */
function deliveryFigures(
  messages: { kind: string; state: string; attempts: { startedAt: number; finishedAt?: number }[] }[],
) {
  const attempts = messages.flatMap((m) => m.attempts);
  const durations = attempts
    .filter((a) => a.finishedAt !== undefined)
    .map((a) => a.finishedAt! - a.startedAt)
    .sort((a, b) => a - b);
  const first = Math.min(...attempts.map((a) => a.startedAt));
  const last = Math.max(...attempts.map((a) => a.finishedAt ?? a.startedAt));
  const delivered = messages.filter((m) => m.state === "DELIVERED").length;
  const at = (q: number) => durations[Math.min(durations.length - 1, Math.floor(q * durations.length))] ?? 0;
  return {
    jobsDelivered: delivered,
    attempts: attempts.length,
    jobsPerSecond: Math.round(delivered / Math.max(1, (last - first) / 1000)),
    attemptMsP50: at(0.5),
    attemptMsP95: at(0.95),
  };
}

/** Jobs delivered after the last fault, per second, and the database connections and round trips each cost. */
function recoveryFigures(
  messages: { state: string; attempts: { startedAt: number; finishedAt?: number; status?: number }[] }[],
  from: number,
  proxyFrom: { connections: number; roundTrips: number },
  proxyTo: { connections: number; roundTrips: number },
) {
  const attempts = messages.flatMap((m) => m.attempts).filter((a) => a.startedAt >= from);
  const last = Math.max(from, ...attempts.map((a) => a.finishedAt ?? a.startedAt));
  const n = Math.max(1, attempts.length);
  return {
    attempts: attempts.length,
    seconds: Math.round((last - from) / 1000),
    attemptsPerSecond: Math.round(attempts.length / Math.max(1, (last - from) / 1000)),
    connectionsPerAttempt: Number(((proxyTo.connections - proxyFrom.connections) / n).toFixed(2)),
    roundTripsPerAttempt: Number(((proxyTo.roundTrips - proxyFrom.roundTrips) / n).toFixed(2)),
  };
}
