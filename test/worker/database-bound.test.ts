import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { MAX_CONNECTIONS_PER_INVOCATION, openNeonDatabase } from "../../src/worker/database.ts";
import type { Config } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";

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

describe("a connection lost while a request holds it", () => {
  it("fails the holder's next query, and nothing throws out of the socket's event", async () => {
    // A connection taken with connect() (Drizzle's transactions, one-trip writes) has
    // no listener of pg-pool's. Unheard, the driver threw the loss from the socket's
    // event: in workerd an "Uncaught" line per connection, ~100 for one database blip.
    const uncaught: unknown[] = [];
    const record = (error: unknown) => void uncaught.push(error);
    process.on("uncaughtException", record);
    const { pool, close } = openInvocationDatabase();
    try {
      const client = await pool.connect();
      const { rows } = (await client.query("SELECT pg_backend_pid() AS pid")) as { rows: { pid: number }[] };
      const pid = rows[0]!.pid;
      // Between two of its queries, as a transaction is while its route works.
      await t.pool.query("SELECT pg_terminate_backend($1)", [pid]);
      await waitFor(async () => {
        const { rowCount } = await t.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid]);
        return rowCount === 0;
      });
      await new Promise((r) => setTimeout(r, 200));
      // The holder learns of it from its next query, as a 503's reason says.
      await expect(client.query("SELECT 1")).rejects.toThrow(/not queryable|terminat/);
      client.release(true);
    } finally {
      process.off("uncaughtException", record);
      await close();
    }
    expect(uncaught).toEqual([]);
  });

  it("logs a connection lost while idle by its own words, not workerd's event's 'Uncaught Error: …'", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const { pool, close } = openInvocationDatabase();
    try {
      // What workerd's WebSocket reports (routes.test.ts has the same shape).
      const socketEvent = {
        type: "error",
        message: "Uncaught Error: Network connection lost.",
        error: new Error("Network connection lost."),
      };
      (pool as unknown as { emit(event: "error", error: unknown): void }).emit("error", socketEvent);
      expect(errors.mock.calls).toEqual([["database pool:", "Network connection lost."]]);
    } finally {
      errors.mockRestore();
      await close();
    }
  });
});

describe("closing an invocation's pool", () => {
  it("ends even when a connection was taken and never given back (drizzle's failed BEGIN leaves one)", async () => {
    const { pool, close } = openInvocationDatabase();
    const lost = await pool.connect();
    const { rows } = (await lost.query("SELECT pg_backend_pid() AS pid")) as { rows: { pid: number }[] };
    const given = await pool.connect();
    given.release();
    // pool.end() waits for every connection; a lost one held it for ever (workerd then
    // cancelled the request's background work as hung).
    const ended = await Promise.race([
      close().then(() => "ended"),
      new Promise((r) => setTimeout(() => r("still waiting after 5 s"), 5_000)),
    ]);
    expect(ended).toBe("ended");
    // And the lost connection is closed, not left open on the server.
    await waitFor(async () => {
      const { rowCount } = await t.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [
        rows[0]!.pid,
      ]);
      return rowCount === 0;
    });
  }, 15_000);

  it("ends while a query still runs, and that query's own release is not a second one", async () => {
    // A request whose Promise.all had one read fail answers at once, and its pool is
    // closed while the other reads still run on their connections: close() drops
    // them, and each read's own release when it settled threw "Release called on
    // client which has already been released to the pool" out of the driver (GET
    // /admin/stats with the schema behind, a walkthrough of stop 49).
    const { pool, close } = openInvocationDatabase();
    const thrown: unknown[] = [];
    const hear = (error: unknown) => void thrown.push(error);
    process.on("uncaughtException", hear);
    process.on("unhandledRejection", hear);
    try {
      const running = pool.query("SELECT pg_sleep(0.5) /* still-running */").then(
        () => "finished",
        (error: Error) => error.message,
      );
      await waitFor(async () => {
        const { rowCount } = await t.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE query LIKE '%still-running%' AND pid <> pg_backend_pid()",
        );
        return rowCount === 1;
      });
      await close();
      // The query fails with its connection dropped; before, its promise never settled.
      const settled = await Promise.race([
        running,
        new Promise((r) => setTimeout(() => r("not settled after 5 s"), 5_000)),
      ]);
      expect(settled).toBe("Connection terminated");
      await new Promise((r) => setTimeout(r, 300));
      expect(thrown.map((e) => (e as Error).message)).toEqual([]);
    } finally {
      process.off("uncaughtException", hear);
      process.off("unhandledRejection", hear);
    }
  });
});
