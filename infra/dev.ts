// `npm run dev`: the whole local stack in one command, no cloud account needed.
// Postgres (embedded, data kept in .dev/pg; DATABASE_URL overrides) → migrations →
// WebSocket-to-TCP proxy (the Neon driver's way in) → QStash dev server → mail and
// webhook sink → `wrangler dev` with generated .dev.vars → the cron sweep on
// wrangler.toml's schedule (DEV_SWEEP_SECONDS overrides, 0 = off). Ctrl-C stops all of it,
// as does the Worker dying (wrangler or workerd, see dev-watch.ts).
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { DEV_KEY_SCOPE, ensureDevApiKey, newDevApiKey } from "./dev-api-key.ts";
import {
  forgetStack,
  recordStack,
  stopLeftovers,
  stopLeftoversOnDataDir,
  type StackRecord,
} from "./dev-leftovers.ts";
import { devCronFromWranglerToml, startDevSweep } from "./dev-sweep.ts";
import { devBanner, redact } from "./dev-banner.ts";
import { devVars, writeDevVars } from "./dev-vars.ts";
import { watchWrangler } from "./dev-watch.ts";
import { startMailSink, type MailSink } from "./mail-sink.ts";
import {
  DEV_KEEP_SETTLED,
  restoredText,
  startQStashDev,
  timeScaleFrom,
  type QStashDev,
} from "./qstash-dev/server.ts";
import { startWsProxy, type WsProxy } from "./ws-proxy.ts";
import {
  freePort,
  migrateDatabase,
  migrationOutcome,
  startEmbeddedPostgres,
  type EmbeddedServer,
} from "../src/node/postgres.ts";
import { newSecretsKey } from "../src/domain/webhooks/secret-box.ts";
import { describeFailure } from "../src/cli/failure.ts";
import { healthzVerdict, type HealthzVerdict } from "./dev-ready.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const env = process.env;
// The Worker's and Postgres' ports are named in the banner's URLs and waited on: 0 (any
// free port) came up on a random one and then waited 120 s on :0.
const port = numberFrom("PORT", 8787, 1);
// A fixed port, as Postgres': an endpoint made from the banner's curl names the sink,
// and must reach it again after a restart.
const sinkPort = numberFrom("MAIL_SINK_PORT", 54330);
// Fixed too: the banner has the operator export QSTASH_URL for the CLI's re-sends,
// and on a port chosen anew each start that terminal's commands failed after a
// restart (ECONNREFUSED) while its tokens, kept in .dev/secrets.json, still held.
const qstashPort = numberFrom("QSTASH_DEV_PORT", 54331);
// Read only for the embedded Postgres: with DATABASE_URL it is not the stack's port.
const pgPort = env.DATABASE_URL ? undefined : numberFrom("DEV_PG_PORT", 54329, 1);
/** The sink's newest requests kept for GET /__received; it kept every one, and grew with them. */
const DEV_KEEP_RECEIVED = 2_000;
const publicUrl = `http://127.0.0.1:${port}`;
// As Cloudflare runs `crons` in production; `wrangler dev --test-scheduled` only on request.
const devCron = devCronFromWranglerToml(readFileSync(path.join(root, "wrangler.toml"), "utf8"));
const sweepSeconds = wholeNumberFrom(
  "DEV_SWEEP_SECONDS",
  devCron.seconds,
  86_400,
  "a number of seconds, 0 for off",
);
// As `npm run qstash:dev` reads it: 0.01 makes an hour of QStash retries 36 s.
const qstashTimeScale = qstashTimeScaleFromEnv();
// One queue per Worker port: its jobs are addressed to that Worker (PUBLIC_URL), so a
// stack on another port (a second checkout's, a test's) neither takes nor delivers them.
const qstashStateFile = env.QSTASH_DEV_STATE_FILE || path.join(root, ".dev", "qstash", `${port}.jsonl`);

// What this stack started outside its own process, for the next start to stop if this
// process is killed before it can (infra/dev-leftovers.ts). One per port, as the queue.
const stackFile = path.join(root, ".dev", `stack-${port}.json`);
const stackRecord: StackRecord = { pid: process.pid };
const recordPart = (part: Partial<StackRecord>) => {
  Object.assign(stackRecord, part);
  recordStack(stackFile, stackRecord);
};

const step = (line: string) => console.log(`[dev] ${line}`);

// Everything started so far, stopped in reverse order (wrangler first, Postgres last).
const stops: { name: string; stop: () => Promise<unknown> }[] = [];
let stopping: Promise<void> | undefined;

function stopAll(code: number): Promise<void> {
  stopping ??= (async () => {
    step("stopping…");
    let allStopped = true;
    for (const { name, stop } of stops.reverse()) {
      // Each part stops within a few seconds; one that does not is named, so a stop
      // that hangs says where.
      const slow = setTimeout(() => step(`still stopping ${name} after 5 s…`), 5_000);
      await stop().catch((error: Error) => {
        allStopped = false;
        console.error(`[dev] stopping ${name}: ${error.message}`);
      });
      clearTimeout(slow);
    }
    // Only a record this stack wrote (one of its parts started); kept when a part may
    // still run: the next start then stops it.
    const recorded = stackRecord.postgres !== undefined || stackRecord.wrangler !== undefined;
    if (recorded && allStopped) forgetStack(stackFile);
    step("stopped");
    process.exit(code);
  })();
  return stopping;
}
process.on("SIGINT", () => void stopAll(0));
process.on("SIGTERM", () => void stopAll(0));
// The terminal closed. Left to the default, this process ended at once and wrangler's
// group (started detached, so Ctrl-C reaches only us) lived on holding the ports.
process.on("SIGHUP", () => void stopAll(0));
// Whoever reads our output can go first: Ctrl-C on `npm run dev | tee dev.log` reaches
// tee too, and writing "[dev] stopping…" then failed with EPIPE, which, unhandled,
// ended this process before wrangler's detached group was stopped (it lived on,
// holding the port). Output nobody reads is dropped, and the stack stops.
for (const stream of [process.stdout, process.stderr]) stream.on("error", () => void stopAll(1));

try {
  await main();
} catch (error) {
  // Not everything thrown is an Error (a package may reject with nothing).
  console.error(`[dev] ${error instanceof Error ? error.message : `failed: ${String(error)}`}`);
  await stopAll(1);
}

async function main() {
  // A stack on this port whose own process was killed left wrangler and Postgres
  // running, holding the ports checked next: stopped here, saying so.
  await stopLeftovers(stackFile, { log: step });
  // Checked before anything starts: otherwise Postgres, the proxy and QStash come up
  // and only wrangler fails, naming a --port flag this command does not take.
  const fixed: [number, string][] = [
    [port, "PORT"],
    [sinkPort, "MAIL_SINK_PORT"],
    [qstashPort, "QSTASH_DEV_PORT"],
  ];
  if (pgPort !== undefined) fixed.push([pgPort, "DEV_PG_PORT"]);
  ensureDistinctPorts(fixed);
  const own = fixed.map(([p]) => p);
  await ensurePortFree(port, "PORT", own);
  await ensurePortFree(sinkPort, "MAIL_SINK_PORT", own);
  await ensurePortFree(qstashPort, "QSTASH_DEV_PORT", own);
  const secrets = await localSecrets();

  let databaseUrl = env.DATABASE_URL;
  if (databaseUrl) {
    step(`Postgres: using DATABASE_URL (${redact(databaseUrl)})`);
  } else {
    const dataDir = postgresDataDir();
    // Read at start-up whenever DATABASE_URL is unset, as here.
    const embeddedPort = pgPort!;
    const fresh = !existsSync(path.join(dataDir, "PG_VERSION"));
    // A stack killed on another port (PORT changed since) left its Postgres on this folder.
    await stopLeftoversOnDataDir(path.dirname(stackFile), dataDir, stackFile, { log: step });
    step(
      `Postgres: ${fresh ? "initialising" : "starting"} embedded server in ${dataDir} on port ${embeddedPort}…`,
    );
    recordPart({ postgres: { dataDir } });
    // Stopped last, by stopAll: the package's own Ctrl-C hook stopped it, then exited
    // this process while the Worker was still being stopped.
    const pg: EmbeddedServer = await startEmbeddedPostgres({
      dataDir,
      port: embeddedPort,
      callerHandlesSignals: true,
    });
    stops.push({ name: "Postgres", stop: () => pg.stop() });
    // Without it every request would answer 503 while the banner says all is well.
    pg.onUnexpectedExit((how) => {
      console.error(`[dev] Postgres exited (${how}); stopping the rest`);
      void stopAll(1);
    });
    databaseUrl = pg.url;
  }

  step("migrations: applying…");
  // The first thing to reach the database: its failure is said as the CLI says it.
  const migrated = await migrateDatabase(databaseUrl, undefined, {
    log: (line) => step(`migrations: ${line}`),
  }).catch((error: unknown) => {
    throw new Error(`migrations: ${describeFailure(error)}`, { cause: error });
  });
  // A start after `git pull` upgrades the database: say so, and how far.
  step(`migrations: ${migrationOutcome(migrated)}`);

  const keyState = await ensureDevApiKey(databaseUrl, secrets.DEV_API_KEY);
  step(
    keyState === "revoked"
      ? "API key: the dev key in .dev/secrets.json was revoked; delete DEV_API_KEY there to get a new one"
      : `API key (scope "${DEV_KEY_SCOPE}"): ${keyState === "created" ? "created" : "found"}, kept in .dev/secrets.json`,
  );

  // Pooled, as a deployment's Worker reaches Neon's pooled (`-pooler`) endpoint:
  // connections are answered by the pooler, which lends each transaction one of a
  // few server connections, so an invocation's connect costs no backend start.
  // The pooler also takes the pipelined password whatever the server's own auth.
  const proxy: WsProxy = await startWsProxy({
    port: numberFrom("DEV_WS_PROXY_PORT", 0),
    pool: { upstreamUrl: databaseUrl },
  });
  stops.push({ name: "ws proxy", stop: () => proxy.close() });
  step(`ws proxy (pooled, transaction mode): ${proxy.url}`);

  const qstash: QStashDev = await startQStashDev({
    port: qstashPort,
    token: env.QSTASH_TOKEN || secrets.QSTASH_TOKEN,
    currentSigningKey: env.QSTASH_CURRENT_SIGNING_KEY || secrets.QSTASH_CURRENT_SIGNING_KEY,
    nextSigningKey: env.QSTASH_NEXT_SIGNING_KEY || secrets.QSTASH_NEXT_SIGNING_KEY,
    timeScale: qstashTimeScale,
    log: (line) => console.log(line),
    // Its queue outlives the stack, as QStash's does (ADR 0029): jobs waiting for a
    // retry or behind flow control when the stack stopped are delivered after the next
    // start, once the Worker answers, not lost with the process.
    stateFile: qstashStateFile,
    startPaused: true,
    // Left running, it kept every message it had delivered (with the sink's copies, this
    // process grew from 160 to 481 MB in 19 minutes of a soak's load).
    keepSettled: DEV_KEEP_SETTLED,
  });
  stops.push({ name: "QStash dev server", stop: () => qstash.close() });
  step(
    `QStash dev server: ${qstash.url}${qstashTimeScale === 1 ? "" : ` (time scale ${qstashTimeScale}: delays and retry backoff ×${qstashTimeScale})`}; queue kept in ${path.relative(root, qstashStateFile)}: ${restoredText(qstash.restored)}`,
  );

  const sink: MailSink = await startMailSink({ port: sinkPort, keepReceived: DEV_KEEP_RECEIVED });
  stops.push({ name: "mail/webhook sink", stop: () => sink.close() });
  step(`mail/webhook sink: ${sink.url}`);

  // Values already in the environment win over generated ones.
  const vars = devVars(
    {
      // The Worker reaches this (TCP) Postgres the way it reaches Neon: over WebSockets,
      // with the pooled connection string (the pooler checks its password).
      DATABASE_URL: proxy.pooledUrl!,
      NEON_WS_PROXY: proxy.address,
      QSTASH_URL: qstash.url,
      QSTASH_TOKEN: qstash.token,
      QSTASH_CURRENT_SIGNING_KEY: qstash.currentSigningKey,
      QSTASH_NEXT_SIGNING_KEY: qstash.nextSigningKey,
      PUBLIC_URL: env.PUBLIC_URL || publicUrl,
      ADMIN_TOKEN: env.ADMIN_TOKEN || secrets.ADMIN_TOKEN,
      MAIL_API_URL: env.MAIL_API_URL || `${sink.url}/mail`,
      // Required with MAIL_API_URL; locally every mail lands in the sink's log anyway.
      MAIL_TO: env.MAIL_TO || "ops@example.com",
      WEBHOOK_SECRETS_KEY: env.WEBHOOK_SECRETS_KEY || secrets.WEBHOOK_SECRETS_KEY,
      // Local receivers (the sink) are http on 127.0.0.1, which a deployment refuses.
      WEBHOOK_ALLOW_PRIVATE_URLS: env.WEBHOOK_ALLOW_PRIVATE_URLS || "true",
    },
    env,
  );
  // Read by `wrangler dev` at start; git-ignored, rewritten on every run.
  await writeDevVars(path.join(root, ".dev.vars"), vars);
  step("wrote .dev.vars");

  step(`wrangler dev: starting on ${publicUrl}…`);
  const wrangler = startWrangler(await freePort());
  if (wrangler.pid !== undefined) recordPart({ wrangler: { pgid: wrangler.pid } });
  stops.push({ name: "wrangler dev", stop: () => stopProcessGroup(wrangler) });
  // Without it a dead Worker leaves the rest running and the terminal looking alive.
  const watch = watchWrangler({
    wrangler,
    onDeath: (why) => {
      if (stopping) return;
      console.error(`[dev] ${why}; stopping the rest`);
      void stopAll(1);
    },
  });
  // Stopped before wrangler is (stops run in reverse): stopping it is no death.
  stops.push({ name: "wrangler watch", stop: async () => watch.stop() });
  await waitForWorker(wrangler);
  // Delivery waited for the Worker: a job restored from the last run would otherwise have
  // spent attempts (and, at a small time scale, its retries) on a port nobody answered.
  qstash.resumeDelivery();
  // Stopped before wrangler (stops run in reverse): no attempt starts against a Worker
  // going away, and those under way are answered. Stopping the Worker first failed
  // them (ECONNREFUSED, a cut connection), each costing a job a retry (a soak's Ctrl-C: 11).
  stops.push({
    name: "QStash deliveries",
    stop: async () => {
      const cut = await qstash.quiesce(5_000);
      if (cut > 0) step(`${cut} webhook or job deliveries still under way after 5 s; the Worker stops now`);
    },
  });

  // Stopped before wrangler (stops run in reverse): no request reaches a stopping Worker.
  if (stopping) return;
  if (sweepSeconds > 0) {
    const sweep = startDevSweep({
      workerUrl: publicUrl,
      cron: devCron.cron,
      periodMs: sweepSeconds * 1000,
      onFailure: (line) => console.error(`[dev] ${line}`),
    });
    stops.push({ name: "cron sweep", stop: () => sweep.stop() });
  }
  const sweepSource = env.DEV_SWEEP_SECONDS
    ? "DEV_SWEEP_SECONDS"
    : devCron.understood
      ? `wrangler.toml "${devCron.cron}"`
      : `wrangler.toml "${devCron.cron}" is not a schedule this reads, so every minute`;
  step(
    sweepSeconds > 0
      ? `cron sweep: every ${sweepSeconds} s (${sweepSource}); the Worker logs a sweep: line each time`
      : "cron sweep: off (DEV_SWEEP_SECONDS=0); run it by hand with the curl below",
  );

  console.log(
    devBanner({
      publicUrl,
      sweepSeconds,
      cron: devCron.cron,
      databaseUrl,
      databaseUrlGiven: Boolean(env.DATABASE_URL),
      proxyUrl: proxy.url,
      pooledUrl: proxy.pooledUrl!,
      qstashUrl: qstash.url,
      sinkUrl: sink.url,
      apiKeyScope: DEV_KEY_SCOPE,
      apiKey: secrets.DEV_API_KEY,
      adminTokenGiven: Boolean(env.ADMIN_TOKEN),
      vars,
    }),
  );
}

/**
 * Where the embedded cluster lives. As root, Postgres runs as the `postgres` user,
 * which must be able to walk every directory above the data folder; a checkout
 * under a root-only home (/root is 0700) is not walkable. Then the data goes to a
 * per-checkout folder under /var/tmp (kept across runs, unlike /tmp on many
 * systems), and the line above says so. DEV_PG_DIR picks a folder explicitly; an
 * unreachable explicit choice is an error rather than a silent move.
 */
function postgresDataDir(): string {
  const isRoot = process.getuid?.() === 0;
  const explicit = env.DEV_PG_DIR ? path.resolve(env.DEV_PG_DIR) : undefined;
  const preferred = explicit ?? path.join(root, ".dev", "pg");
  if (!isRoot) return preferred;
  // Our own git-ignored folder: made walkable here (a umask of 077 would make it 0700).
  if (!explicit) {
    mkdirSync(path.join(root, ".dev"), { recursive: true });
    chmodSync(path.join(root, ".dev"), 0o755);
  }
  const blocked = unwalkableAncestor(preferred);
  if (!blocked) return preferred;
  if (explicit) {
    throw new Error(
      `DEV_PG_DIR ${explicit}: the postgres user cannot enter ${blocked} (Postgres refuses to run as root, ` +
        `so it runs as 'postgres'). Choose a folder outside it, or chmod o+x ${blocked}.`,
    );
  }
  const id = createHash("sha256").update(root).digest("hex").slice(0, 10);
  const fallback = path.join("/var/tmp", `edge-outbox-dev-${id}`, "pg");
  step(`Postgres: the postgres user cannot enter ${blocked}, so the data lives in ${fallback} instead`);
  return fallback;
}

/** The first existing folder above the data folder that others (the postgres user) cannot traverse. */
function unwalkableAncestor(dataDir: string): string | undefined {
  let dir = path.dirname(dataDir);
  for (;;) {
    if (existsSync(dir) && (statSync(dir).mode & 0o001) === 0) return dir;
    const up = path.dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

interface Secrets {
  ADMIN_TOKEN: string;
  /** A tenant API key for the domain routes (scope "dev"), made on first start. */
  DEV_API_KEY: string;
  QSTASH_TOKEN: string;
  QSTASH_CURRENT_SIGNING_KEY: string;
  QSTASH_NEXT_SIGNING_KEY: string;
  WEBHOOK_SECRETS_KEY: string;
}

/**
 * Generated once and kept in .dev/secrets.json, so a token pasted into a terminal
 * keeps working across restarts. Local only: the QStash dev server accepts them.
 * WEBHOOK_SECRETS_KEY must outlive a restart too: the endpoint secrets sealed
 * under it stay in the kept database, and a new key would open none of them.
 * A file from before a secret existed gets that one added, the others kept.
 */
async function localSecrets(): Promise<Secrets> {
  const file = path.join(root, ".dev", "secrets.json");
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Partial<Secrets>) : {};
  const secrets: Secrets = {
    // A file from before API keys existed gains one; nothing else in it changes.
    DEV_API_KEY: kept.DEV_API_KEY ?? newDevApiKey(),
    ADMIN_TOKEN: kept.ADMIN_TOKEN ?? `dev_admin_${randomBytes(18).toString("base64url")}`,
    QSTASH_TOKEN: kept.QSTASH_TOKEN ?? `qstash_dev_${randomBytes(24).toString("base64url")}`,
    QSTASH_CURRENT_SIGNING_KEY:
      kept.QSTASH_CURRENT_SIGNING_KEY ?? `sig_${randomBytes(21).toString("base64url")}`,
    QSTASH_NEXT_SIGNING_KEY: kept.QSTASH_NEXT_SIGNING_KEY ?? `sig_${randomBytes(21).toString("base64url")}`,
    WEBHOOK_SECRETS_KEY: kept.WEBHOOK_SECRETS_KEY ?? newSecretsKey(),
  };
  if (Object.keys(secrets).some((name) => !(name in kept))) {
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return secrets;
}

/**
 * `inspectorPort`: one the system handed out just now. Left to itself wrangler
 * probes 9229 and up, and two stacks started together both found 9229 free; the
 * second's workerd then died on it, saying to change a `--port` this command
 * does not take.
 */
function startWrangler(inspectorPort: number): ChildProcess {
  const child = spawn(
    "npx",
    [
      "wrangler",
      "dev",
      "--port",
      String(port),
      "--ip",
      "127.0.0.1",
      "--inspector-port",
      String(inspectorPort),
      "--test-scheduled",
      // Hotkeys would read the terminal this script owns; Ctrl-C reaches us instead.
      "--show-interactive-dev-session=false",
    ],
    {
      cwd: root,
      env: { ...env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" },
      stdio: ["ignore", "pipe", "pipe"],
      // Its own process group: npx → wrangler → workerd are stopped together, by group id.
      detached: true,
    },
  );
  const prefix = (stream: NodeJS.ReadableStream, write: (line: string) => void) => {
    let buffered = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      for (const line of lines) if (line.trim()) write(`[wrangler] ${line}`);
    });
  };
  prefix(child.stdout!, (line) => console.log(line));
  prefix(child.stderr!, (line) => console.error(line));
  return child;
}

async function waitForWorker(child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 120_000;
  let last = "no answer";
  while (Date.now() < deadline) {
    if (child.exitCode !== null || stopping) throw new Error("wrangler dev did not start");
    let verdict: HealthzVerdict = { ready: false };
    try {
      const res = await fetch(`${publicUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
      verdict = healthzVerdict(res.status, await res.text());
      last = `the last answer ${res.status}`;
    } catch {
      // Not listening yet.
    }
    if (verdict.ready) {
      step("wrangler dev: ready (healthz 200)");
      return;
    }
    // A binding the Worker refuses is named now, not after two minutes of polling.
    if (verdict.fatal) throw new Error(verdict.fatal);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`wrangler dev did not answer ${publicUrl}/healthz within 120 s (${last})`);
}

function stopProcessGroup(child: ChildProcess): Promise<void> {
  if (child.pid === undefined) return Promise.resolve();
  const killGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal);
    } catch {
      // Already gone.
    }
  };
  if (child.exitCode !== null || child.signalCode !== null) {
    // The leader is gone (wrangler killed, or exited on its own), not necessarily what
    // it started: workerd left behind kept the port, took connections and answered none.
    killGroup("SIGKILL");
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const force = setTimeout(() => killGroup("SIGKILL"), 5_000);
    child.once("exit", () => {
      clearTimeout(force);
      // Whatever of the group outlived its leader (workerd) goes too.
      killGroup("SIGKILL");
      resolve();
    });
    killGroup("SIGTERM");
  });
}

/** Two of the stack's fixed ports the same: the second server failed with a bare EADDRINUSE. */
function ensureDistinctPorts(ports: [number, string][]): void {
  for (const [i, [p, name]] of ports.entries()) {
    const other = ports.slice(0, i).find(([q]) => q === p && p !== 0);
    if (other) throw new Error(`${other[1]} and ${name} are both ${p}: give each its own port`);
  }
}

/**
 * Fails with what to do when something already listens on a port the stack needs.
 * The suggested port skips the stack's own (`own`): `wanted + 1` was often the next
 * variable's default, so following the hint failed on that one. And it is one found
 * free just now: unchecked, it could be taken too (the next stack's, a second
 * checkout's), and following the hint failed the same way.
 */
async function ensurePortFree(wanted: number, variable: string, own: number[]): Promise<void> {
  if (wanted === 0) return;
  const error = await refusal(wanted);
  if (!error) return;
  if (error.code !== "EADDRINUSE") throw error;
  let next = wanted + 1;
  while (next <= 65_535 && (own.includes(next) || (await refusal(next)))) next++;
  // None free above it: one the system hands out.
  while (next > 65_535 || own.includes(next)) next = await freePort();
  throw new Error(
    `port ${wanted} on 127.0.0.1 is taken (another npm run dev, or another server): stop it, or choose another port, e.g. ${variable}=${next} npm run dev`,
  );
}

/** Why `port` on 127.0.0.1 cannot be listened on, or undefined when it can (it is let go at once). */
function refusal(port: number): Promise<NodeJS.ErrnoException | undefined> {
  const probe = createServer();
  return new Promise((resolve) => {
    probe.once("error", resolve);
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(undefined)));
  });
}

/** A port number from `least` (0: any free port, where the stack reads back which) to 65535. */
function numberFrom(name: string, fallback: number, least = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < least || n > 65_535) {
    console.error(`[dev] ${name} must be a port number from ${least} to 65535, got ${JSON.stringify(raw)}`);
    process.exit(1);
  }
  return n;
}

/** A whole number from 0 to max, or the fallback when unset; refused before anything starts. */
function wholeNumberFrom(name: string, fallback: number, max: number, what: string): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n > max) {
    console.error(
      `[dev] ${name} must be a whole number from 0 to ${max} (${what}), got ${JSON.stringify(raw)}`,
    );
    process.exit(1);
  }
  return n;
}

/** QSTASH_DEV_TIME_SCALE as `npm run qstash:dev` reads it; a bad value stops the start. */
function qstashTimeScaleFromEnv(): number {
  try {
    return timeScaleFrom(env.QSTASH_DEV_TIME_SCALE);
  } catch (error) {
    console.error(`[dev] ${(error as Error).message}`);
    process.exit(1);
  }
}
