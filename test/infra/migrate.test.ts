import { createServer, type Server } from "node:net";
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { migrateDatabase, withDatabase } from "../../src/node/postgres.ts";

// `migrate` against what a deployment meets: another run at the same moment, and a
// host that takes the connection and never answers.
const adminUrl = inject("adminDatabaseUrl");
const name = `edge_outbox_migrate_${process.pid}`;

afterAll(async () => {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
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
