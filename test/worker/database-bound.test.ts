import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { MAX_CONNECTIONS_PER_INVOCATION, openNeonDatabase } from "../../src/worker/database.ts";
import type { Config } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";

// One invocation's pool never holds more than its bound, however many queries it
// starts at once: the rest wait for a connection instead of opening one.
const t = useTestDatabase();
let proxy: WsProxy;

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
});
afterAll(async () => {
  await proxy?.close();
});

/** One invocation's database, as the Worker opens it, through the ws proxy. */
const openInvocationDatabase = () =>
  openNeonDatabase({
    DATABASE_URL: t.url,
    NEON_WS_PROXY: proxy.address,
    // As the global set-up found: a trust or SCRAM server refuses a pipelined connect.
    NEON_PIPELINE_CONNECT: process.env.NEON_PIPELINE_CONNECT !== "off",
  } as Config);

describe("connections per invocation", () => {
  it(`opens at most ${MAX_CONNECTIONS_PER_INVOCATION} connections for many concurrent queries`, async () => {
    const { pool, close } = openInvocationDatabase();
    try {
      const queries = Array.from({ length: 8 }, () => pool.query("SELECT pg_sleep(0.4) /* bound-probe */"));
      let peak = 0;
      for (let i = 0; i < 12; i++) {
        await new Promise((r) => setTimeout(r, 100));
        const { rows } = await t.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%bound-probe%'`,
        );
        peak = Math.max(peak, rows[0]!.n);
      }
      await Promise.all(queries);
      expect(peak).toBe(MAX_CONNECTIONS_PER_INVOCATION);
    } finally {
      await close();
    }
  });

  it("keeps an idle connection while the invocation waits on something slow (a 15 s webhook receiver)", async () => {
    // pg's default closed it after 10 s idle: recording the attempt then connected
    // again, and in workerd that close was logged as "Network connection lost".
    const { pool, close } = openInvocationDatabase();
    try {
      const pid = async () =>
        ((await pool.query("SELECT pg_backend_pid() AS pid")) as { rows: { pid: number }[] }).rows[0]!.pid;
      const first = await pid();
      const before = proxy.stats().connections;
      await new Promise((r) => setTimeout(r, 11_000));
      expect(await pid()).toBe(first);
      expect(proxy.stats().connections).toBe(before);
    } finally {
      await close();
    }
  }, 30_000);
});
