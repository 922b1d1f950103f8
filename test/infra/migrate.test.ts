import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { MIGRATION_LOCK, migrateDatabase, withDatabase } from "../../src/node/postgres.ts";

// `migrate` against what a deployment meets: another run at the same moment, and a
// host that takes the connection and never answers.
const adminUrl = inject("adminDatabaseUrl");
const name = `edge_outbox_migrate_${process.pid}`;
const lockName = `edge_outbox_migrate_lock_${process.pid}`;

afterAll(async () => {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`DROP DATABASE IF EXISTS ${lockName} WITH (FORCE)`);
  await admin.end();
});

describe("migrate", () => {
  it("two runs at once on a fresh database both succeed, one after the other", async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const url = withDatabase(adminUrl, name);
    // Without the lock the second failed on the first's half-made tables.
    await expect(Promise.all([migrateDatabase(url), migrateDatabase(url)])).resolves.toBeDefined();
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const { rows } = await db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM drizzle."__drizzle_migrations"',
      );
      const { rows: applied } = await db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM (SELECT DISTINCT hash FROM drizzle."__drizzle_migrations") h',
      );
      // Each migration recorded once.
      expect(rows[0]!.n).toBe(applied[0]!.n);
      expect(rows[0]!.n).toBeGreaterThan(10);
    } finally {
      await db.end();
    }
  }, 120_000);

  it("gives up on a host that never answers, instead of hanging", async () => {
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as { port: number };
    try {
      const started = Date.now();
      await expect(
        migrateDatabase(`postgres://u:p@127.0.0.1:${port}/x`, undefined, { connectTimeoutMs: 500 }),
      ).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      silent.close();
    }
  });
});

// A migration that needs a table lock another session holds, as an upgrade meets on a
// live database: one pending migration adding a column to a table some transaction
// is reading.
describe("migrate behind a long transaction", () => {
  const url = withDatabase(adminUrl, lockName);
  let folder: string;

  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${lockName} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${lockName}`);
    await admin.end();
    folder = await mkdtemp(path.join(tmpdir(), "edge-outbox-migrations-"));
    await mkdir(path.join(folder, "meta"));
    const entry = { idx: 0, version: "7", when: 1, tag: "0000_add", breakpoints: true };
    await writeFile(
      path.join(folder, "meta", "_journal.json"),
      JSON.stringify({ version: "7", dialect: "postgresql", entries: [entry] }),
    );
    await writeFile(path.join(folder, "0000_add.sql"), "ALTER TABLE lockme ADD COLUMN c int;");
    return () => rm(folder, { recursive: true, force: true });
  });

  async function session(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return client;
  }

  async function freshTable(db: pg.Client): Promise<void> {
    await db.query("DROP TABLE IF EXISTS lockme");
    await db.query("DROP SCHEMA IF EXISTS drizzle CASCADE");
    await db.query("CREATE TABLE lockme (id int)");
  }

  async function columnExists(db: pg.Client): Promise<boolean> {
    const { rows } = await db.query(
      "SELECT 1 FROM information_schema.columns WHERE table_name = 'lockme' AND column_name = 'c'",
    );
    return rows.length === 1;
  }

  /** Resolves once some session waits for a lock on lockme that it has not been granted. */
  async function migrationQueued(db: pg.Client): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const { rows } = await db.query(
        "SELECT 1 FROM pg_locks WHERE relation = 'lockme'::regclass AND NOT granted",
      );
      if (rows.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error("the migration never queued for its lock");
  }

  it("does not hold writes to the table for as long as the other transaction lasts, and applies after it", async () => {
    const [holder, writer, check] = await Promise.all([session(), session(), session()]);
    try {
      await freshTable(check);
      await holder.query("BEGIN");
      await holder.query("SELECT * FROM lockme");
      const lines: string[] = [];
      const migrating = migrateDatabase(url, folder, {
        lockTimeoutMs: 300,
        lockAttempts: 50,
        retryPauseMs: 50,
        log: (line) => lines.push(line),
      });
      await migrationQueued(check);
      // Without a lock timeout the insert queued behind the migration's request until
      // the reader committed: here, never, so the race is lost to the 10 s timer.
      const insert = writer.query("INSERT INTO lockme VALUES (1)").then(() => "inserted");
      const timer = new Promise((resolve) => setTimeout(resolve, 10_000, "still waiting"));
      expect(await Promise.race([insert, timer])).toBe("inserted");
      expect(await columnExists(check)).toBe(false);
      await holder.query("COMMIT");
      await migrating;
      expect(await columnExists(check)).toBe(true);
      expect(lines.some((line) => /waited 300 ms for a lock .* trying again/.test(line))).toBe(true);
    } finally {
      await Promise.all([holder.end(), writer.end(), check.end()]);
    }
  }, 60_000);

  it("gives up with the reason after its tries, having applied nothing", async () => {
    const [holder, check] = await Promise.all([session(), session()]);
    try {
      await freshTable(check);
      await holder.query("BEGIN");
      await holder.query("SELECT * FROM lockme");
      await expect(
        migrateDatabase(url, folder, { lockTimeoutMs: 100, lockAttempts: 2, retryPauseMs: 10 }),
      ).rejects.toThrow(/migrations not applied: .*lock another session holds, on each of 2 tries/);
      await holder.query("COMMIT");
      expect(await columnExists(check)).toBe(false);
      const { rows } = await check.query('SELECT count(*)::int AS n FROM drizzle."__drizzle_migrations"');
      expect(rows[0].n).toBe(0);
    } finally {
      await Promise.all([holder.end(), check.end()]);
    }
  }, 60_000);

  it("says it is waiting for another migrate, then applies once that one ends", async () => {
    const [other, check] = await Promise.all([session(), session()]);
    try {
      await freshTable(check);
      await other.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
      const lines: string[] = [];
      const migrating = migrateDatabase(url, folder, { log: (line) => lines.push(line) });
      for (let i = 0; i < 200 && lines.length === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      expect(lines).toEqual(["another migrate is running on this database; waiting for it to finish"]);
      expect(await columnExists(check)).toBe(false);
      await other.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]);
      await migrating;
      expect(await columnExists(check)).toBe(true);
    } finally {
      await Promise.all([other.end(), check.end()]);
    }
  }, 60_000);
});
