import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, inject } from "vitest";
import { drizzle, type NodePgDatabase } from "drizzle-orm/node-postgres";
import { withDatabase } from "../../src/node/postgres.ts";

export interface TestDatabase {
  /** Connection string of this file's own database. */
  url: string;
  /** Shared pool for setup and assertions; relays under test get their own connections. */
  pool: pg.Pool;
  db: NodePgDatabase;
  /** A new pool on this database, ended with the file. */
  newPool(max?: number): pg.Pool;
}

/**
 * Gives the calling test file its own database cloned from the migrated template,
 * so files run in parallel without seeing each other's rows.
 */
export function useTestDatabase(): TestDatabase {
  const adminUrl = inject("adminDatabaseUrl");
  const template = inject("templateDatabase");
  const name = `edge_outbox_t_${randomBytes(6).toString("hex")}`;
  const url = withDatabase(adminUrl, name);
  const pools: pg.Pool[] = [];
  const handle = {
    url,
    newPool(max = 4) {
      const pool = new pg.Pool({ connectionString: url, max });
      // A test that cuts a connection on purpose must not crash the run.
      pool.on("error", () => undefined);
      pools.push(pool);
      return pool;
    },
  } as TestDatabase;

  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
    } finally {
      await admin.end();
    }
    handle.pool = handle.newPool(8);
    handle.db = drizzle(handle.pool);
  });

  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  });

  return handle;
}
