import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Pool } from "@neondatabase/serverless";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";

const t = useTestDatabase();
let proxy: WsProxy;
let pool: Pool;

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  pool = new Pool({ connectionString: t.url, max: 2 });
  await t.pool.query("CREATE TABLE proxy_probe (n int)");
});

afterAll(async () => {
  await pool?.end();
  await proxy?.close();
});

describe("ws-proxy: the Neon driver over WebSockets to a plain Postgres", () => {
  it("runs a plain query", async () => {
    const { rows } = await pool.query("SELECT 1 + 1 AS two, current_database() AS db");
    expect(rows).toEqual([{ two: 2, db: new URL(t.url).pathname.slice(1) }]);
  });

  it("commits an interactive transaction", async () => {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("INSERT INTO proxy_probe VALUES (1)");
      // Read-your-own-write inside the transaction proves it is one session.
      const inside = await client.query("SELECT count(*)::int AS n FROM proxy_probe WHERE n = 1");
      expect(inside.rows[0].n).toBe(1);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM proxy_probe WHERE n = 1");
    expect(rows[0].n).toBe(1);
  });

  it("rolls back an interactive transaction", async () => {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query("INSERT INTO proxy_probe VALUES (2)");
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM proxy_probe WHERE n = 2");
    expect(rows[0].n).toBe(0);
  });

  it("surfaces a server error and keeps the connection usable", async () => {
    await expect(pool.query("SELECT * FROM no_such_table")).rejects.toThrow(/no_such_table/);
    const { rows } = await pool.query("SELECT 3 AS n");
    expect(rows).toEqual([{ n: 3 }]);
  });
});
