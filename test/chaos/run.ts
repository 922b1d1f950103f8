// `npm run test:chaos`: the whole system under faults, then the books are checked.
// The Worker bundle in workerd, the Neon driver through the WebSocket proxy, the
// QStash dev server delivering signed jobs back, the mail sink, cron sweeps and
// CLI drains running beside the on-write kicks. Bounded: every loop has a count
// and the run a deadline. Not part of `npm test` (minutes, not seconds).
//
// Faults injected: failing publishes (5xx), slow publishes past the publish
// timeout, relay passes cut between publish and commit (pg_terminate_backend of
// a connection holding claimed rows), the mail provider answering 503 (QStash
// retries), writes rolled back on purpose. Not yet: a Postgres restart and an
// outage long enough to reach the 1-minute backoff cap (see the report).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { unstable_startWorker } from "wrangler";
import { startMailSink } from "../../infra/mail-sink.ts";
import { startQStashDev } from "../../infra/qstash-dev/server.ts";
import { startWsProxy } from "../../infra/ws-proxy.ts";
import { createApiKey } from "../../src/domain/api-keys/keys.ts";
import { freePort, migrateDatabase, startEmbeddedPostgres, withDatabase } from "../../src/node/postgres.ts";

const args = new Map(
  process.argv.slice(2).flatMap((a, i, all) => (a.startsWith("--") ? [[a.slice(2), all[i + 1] ?? ""]] : [])),
);
const TARGET_EVENTS = Number(args.get("events") ?? 10_000);
const WRITERS = Number(args.get("writers") ?? 10);
const DEADLINE_MS = Number(args.get("minutes") ?? 5) * 60_000;
const REPORT = args.get("json") ?? "reports/chaos.json";

const started = Date.now();
const log = (line: string) => console.log(`[chaos ${((Date.now() - started) / 1000).toFixed(1)}s] ${line}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const faults = {
  publishFailures: 0,
  slowPublishes: 0,
  passesCut: 0,
  sinkOutages: 0,
  rolledBack: 0,
  cronSweeps: 0,
  cliDrains: 0,
};

async function main() {
  // ---- the stack --------------------------------------------------------------
  let adminUrl = process.env.DATABASE_URL;
  const embedded = adminUrl ? undefined : await startEmbeddedPostgres();
  adminUrl ??= embedded!.url;
  const dbName = `edge_outbox_chaos_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const url = withDatabase(adminUrl, dbName);
  await migrateDatabase(url);
  const pool = new pg.Pool({ connectionString: url, max: 6 });
  pool.on("error", () => undefined);
  const db = drizzle(pool);

  const proxy = await startWsProxy();
  const qstash = await startQStashDev({ timeScale: 0.01, log: () => undefined });
  const sink = await startMailSink({ log: () => undefined });
  const port = await freePort();
  const workerUrl = `http://127.0.0.1:${port}`;
  const bindings: Record<string, string> = {
    DATABASE_URL: url,
    NEON_WS_PROXY: proxy.address,
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
    QSTASH_CURRENT_SIGNING_KEY: qstash.currentSigningKey,
    QSTASH_NEXT_SIGNING_KEY: qstash.nextSigningKey,
    PUBLIC_URL: workerUrl,
    ADMIN_TOKEN: `chaos-admin-${randomBytes(12).toString("hex")}`,
    MAIL_API_URL: `${sink.url}/mail`,
    WEBHOOK_SECRETS_KEY: Buffer.from(randomBytes(32)).toString("base64"),
  };
  const worker = await unstable_startWorker({
    config: fileURLToPath(new URL("../../wrangler.toml", import.meta.url)),
    sendMetrics: false,
    bindings: Object.fromEntries(
      Object.entries(bindings).map(([k, v]) => [k, { type: "plain_text" as const, value: v }]),
    ),
    dev: {
      server: { hostname: "127.0.0.1", port },
      inspector: false,
      watch: false,
      persist: false,
      logLevel: "error",
      testScheduled: true,
    },
  });
  await worker.ready;
  const { key } = await createApiKey(db, { scope: "chaos", name: "chaos writers" });
  log(`stack up: worker ${workerUrl}, database ${dbName}`);

  const cleanup = async () => {
    await worker.dispose().catch(() => undefined);
    await Promise.all([qstash.close(), sink.close(), proxy.close()]);
    await pool.end().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
    await embedded?.stop();
  };

  const writeEnd = started + DEADLINE_MS * 0.6;
  let failedRequests = 0;
  const statusCounts: Record<string, number> = {};
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${workerUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).catch((e: Error) => ({ status: 0, json: async () => ({ error: e.message }) }) as Response);
    statusCounts[res.status] = (statusCounts[res.status] ?? 0) + 1;
    if (res.status >= 500 || res.status === 0) failedRequests++;
    return { status: res.status, body: (await res.json().catch(() => ({}))) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  const eventCount = async () =>
    (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM events")).rows[0]!.n;

  // ---- writers ----------------------------------------------------------------
  let written = 0;
  const writer = async (w: number) => {
    for (let i = 0; i < 100_000 && Date.now() < writeEnd && written < TARGET_EVENTS; i++) {
      const pick = (w + i) % 4;
      if (pick === 0) {
        const notes = Array.from({ length: 25 }, (_, j) => ({ title: `chaos ${w}-${i}-${j}`, body: "bulk" }));
        const res = await api("POST", "/notes/import", { notes });
        if (res.status === 201) written += 25;
      } else if (pick === 1) {
        const res = await api("POST", "/suppliers", { name: `Chaos ${w}-${i}` });
        if (res.status !== 201) continue;
        written++;
        const id = res.body.supplier.id as string;
        if ((await api("POST", `/suppliers/${id}/connect`)).status === 200) written++;
        if ((await api("POST", `/suppliers/${id}/activate`)).status === 200) written++;
      } else if (pick === 2) {
        const res = await api("POST", "/notes", { title: `chaos note ${w}-${i}`, body: "x" });
        if (res.status !== 201) continue;
        written++;
        if ((await api("PATCH", `/notes/${res.body.note.id}`, { body: "changed" })).status === 200) written++;
      } else {
        // A write rolled back on purpose: its event must never be fanned out.
        const client = await pool.connect();
        try {
          await client.query("BEGIN");
          await client.query(
            `INSERT INTO corpus_notes (title, body, scope) VALUES ($1, 'never committed', 'chaos')`,
            [`ROLLED BACK ${w}-${i}`],
          );
          await client.query("ROLLBACK");
          faults.rolledBack++;
        } finally {
          client.release();
        }
      }
    }
  };

  // ---- faults and extra passes, each on its own bounded loop ------------------
  let stop = false;
  const loops: Promise<void>[] = [];
  const every = (ms: number, fn: () => Promise<void>) =>
    loops.push(
      (async () => {
        for (let i = 0; i < 10_000 && !stop; i++) {
          await sleep(ms);
          if (stop) break;
          await fn().catch((e: Error) => log(`fault loop: ${e.message}`));
        }
      })(),
    );
  // About one publish in ten fails.
  every(500, async () => {
    qstash.failNextPublishes(1, Math.random() < 0.5 ? 503 : 500);
    faults.publishFailures++;
  });
  // Now and then publishes are slower than the relay's publish timeout.
  every(7_000, async () => {
    qstash.setPublishLatency(12_000);
    faults.slowPublishes++;
    await sleep(300);
    qstash.setPublishLatency(0);
  });
  // A pass cut between publish and commit: a connection holding claimed rows is killed.
  every(1_500, async () => {
    const { rows } = await pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND state = 'idle in transaction' AND query ILIKE '%SKIP LOCKED%' LIMIT 1`,
    );
    for (const { pid } of rows) {
      await pool.query("SELECT pg_terminate_backend($1)", [pid]);
      faults.passesCut++;
    }
  });
  // The mail provider is down for a while: handlers fail, QStash retries.
  every(4_000, async () => {
    sink.respondWith({ status: 503, body: { error: "chaos" } });
    faults.sinkOutages++;
    await sleep(800);
    sink.respondWith(null);
  });
  // Cron sweeps and CLI drains beside the kicks.
  every(2_000, async () => {
    await fetch(`${workerUrl}/__scheduled?cron=*+*+*+*+*`);
    faults.cronSweeps++;
  });
  const cliEnv = {
    PATH: process.env.PATH ?? "",
    DATABASE_URL: url,
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
    PUBLIC_URL: workerUrl,
  };
  every(3_000, async () => {
    await runCli(["relay", "drain", "--budget", "5"], cliEnv);
    faults.cliDrains++;
  });
  let maxConnections = 0;
  every(250, async () => {
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database()",
    );
    maxConnections = Math.max(maxConnections, rows[0]!.n);
  });

  await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
  const lastWrite = Date.now();
  log(`writes done: ${written} events written, ${await eventCount()} in the table; faults stop`);
  stop = true;
  await Promise.all(loops);
  qstash.failNextPublishes(0, 500);
  qstash.setPublishLatency(0);
  sink.respondWith(null);
  const lastFault = Date.now();

  // ---- drain and settle ---------------------------------------------------------
  for (let i = 0; i < 60 && Date.now() < started + DEADLINE_MS; i++) {
    await pool.query("UPDATE outbox_relay_state SET backoff_until = NULL");
    await runCli(["relay", "drain", "--budget", "20"], cliEnv);
    const { rows } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL",
    );
    if (rows[0]!.n === 0) break;
  }
  const drained = Date.now();
  await qstash
    .waitFor(
      (ms) => ms.every((m) => ["DELIVERED", "ERROR", "CANCELLED"].includes(m.state)) || undefined,
      120_000,
    )
    .catch(() => log("QStash did not settle every message in time"));

  // ---- the books ----------------------------------------------------------------
  const q = async <T extends pg.QueryResultRow>(text: string) => (await pool.query<T>(text)).rows;
  const events = await q<{ n: number; pending: number; poisoned: number }>(
    `SELECT count(*)::int AS n,
            count(*) FILTER (WHERE fanned_out_at IS NULL AND poisoned_at IS NULL)::int AS pending,
            count(*) FILTER (WHERE poisoned_at IS NOT NULL)::int AS poisoned FROM events`,
  );
  const rolledBackEvents = await q<{ n: number }>(
    `SELECT count(*)::int AS n FROM events WHERE payload::text LIKE '%ROLLED BACK%'`,
  );
  const published = qstash.messages().filter((m) => m.kind === "publish");
  const perJob = new Map<string, number>();
  for (const m of published) {
    try {
      const body = JSON.parse(m.body) as { subscription: string; event: { id: string } };
      const k = `${body.event.id}:${body.subscription}`;
      perJob.set(k, (perJob.get(k) ?? 0) + 1);
    } catch {
      /* a failure callback or another kind: not a job */
    }
  }
  const doubled = [...perJob.values()].filter((n) => n > 1).length;
  // Every fanout entry names a message the dev server accepted, and vice versa.
  const fanoutIds = await q<{ id: string; sub: string; message_id: string | null }>(
    `SELECT e.id, f.key AS sub, f.value->>'messageId' AS message_id
       FROM events e, jsonb_each(e.fanout) f WHERE e.fanned_out_at IS NOT NULL`,
  );
  const accepted = new Set(published.map((m) => m.messageId));
  const lost = fanoutIds.filter((f) => f.message_id !== null && !accepted.has(f.message_id)).length;
  const supplierEvents = await q<{ n: number }>(
    `SELECT count(*)::int AS n FROM events WHERE type LIKE 'supplier.%' AND fanned_out_at IS NOT NULL`,
  );
  const mails = await q<{ sent: number; events: number }>(
    `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL)::int AS sent, count(DISTINCT event_id)::int AS events
       FROM mail_sends WHERE subscription = 'notify.mail'`,
  );
  const mailKeys = new Map<string, number>();
  for (const r of sink.received({ path: "/mail" })) {
    if (r.status !== 200) continue;
    const k = String(r.headers["idempotency-key"]);
    mailKeys.set(k, (mailKeys.get(k) ?? 0) + 1);
  }
  const jobsDead = qstash.messages().filter((m) => m.state === "ERROR").length;

  const summary = {
    events: events[0]!.n,
    writtenByWriters: written,
    jobs: published.length,
    faults,
    failedRequests,
    statusCounts,
    maxConnections,
    lost,
    doubled,
    rolledBackEventsFanned: rolledBackEvents[0]!.n,
    pendingAfterDrain: events[0]!.pending,
    poisoned: events[0]!.poisoned,
    supplierEvents: supplierEvents[0]!.n,
    mailsSent: mails[0]!.sent,
    mailEvents: mails[0]!.events,
    mailsDeliveredTwice: [...mailKeys.values()].filter((n) => n > 1).length,
    jobsDeadLettered: jobsDead,
    secondsToDrainAfterLastFault: (drained - lastFault) / 1000,
    secondsWriting: (lastWrite - started) / 1000,
    secondsTotal: (Date.now() - started) / 1000,
  };
  console.table(
    Object.entries(summary).flatMap(([k, v]) =>
      typeof v === "object"
        ? Object.entries(v).map(([k2, v2]) => ({ measure: `${k}.${k2}`, value: v2 }))
        : [{ measure: k, value: v }],
    ),
  );
  await writeFile(REPORT, JSON.stringify(summary, null, 2));
  log(`summary written to ${REPORT}`);
  await cleanup();

  const ok =
    summary.lost === 0 &&
    summary.doubled === 0 &&
    summary.rolledBackEventsFanned === 0 &&
    summary.pendingAfterDrain === 0 &&
    summary.poisoned === 0 &&
    summary.failedRequests === 0 &&
    summary.mailEvents === summary.supplierEvents &&
    summary.mailsSent === summary.supplierEvents;
  log(ok ? "PASS" : "FAIL");
  process.exit(ok ? 0 : 1);
}

function runCli(cliArgs: string[], env: Record<string, string>): Promise<number | null> {
  const cli = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", cli, ...cliArgs], { env, stdio: "ignore" });
    // Bounded: a drain that hangs is killed (a cut pass is only replayed, never lost).
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

await main();
