import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Pool } from "@neondatabase/serverless";
import WebSocket from "ws";
import {
  configureNeonForWsProxy,
  delayedInOrder,
  startWsProxy,
  takesPipelinedConnect,
  type WsProxy,
} from "../../infra/ws-proxy.ts";
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
  it("refuses a handshake that carries an Origin, as every browser's does, and takes one without", async () => {
    // A web page the developer visits could otherwise reach the local Postgres through
    // the proxy and log in with its well-known password.
    const { host, port } = new URL(t.url);
    const url = `ws://${proxy.address}/v1?address=${host}:${port}`;
    const handshake = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const socket = new WebSocket(url, { headers });
        socket.on("open", () => {
          socket.close();
          resolve(101);
        });
        socket.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
        socket.on("error", reject);
      });
    expect(await handshake({ Origin: "http://localhost:5173" })).toBe(401);
    expect(await handshake({ Origin: "null" })).toBe(401);
    expect(await handshake({})).toBe(101);
  });

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

describe("ws-proxy: counting and delaying round trips", () => {
  // The embedded Postgres (CI, a fresh machine) uses `password` authentication like
  // Neon; a DATABASE_URL server using trust or SCRAM cannot take a pipelined connect.
  const pipelined = process.env.NEON_PIPELINE_CONNECT !== "off";

  async function connectAndQuery(options: { delayMs?: number; pipelined: boolean }) {
    const counted = await startWsProxy(options.delayMs ? { delayMs: options.delayMs } : {});
    configureNeonForWsProxy(counted, options.pipelined);
    const single = new Pool({ connectionString: t.url, max: 1 });
    try {
      const started = performance.now();
      await single.query("SELECT 1");
      return { stats: counted.stats(), ms: performance.now() - started };
    } finally {
      await single.end();
      await counted.close();
      configureNeonForWsProxy(proxy);
    }
  }

  it.runIf(pipelined)("connects and runs a first query in one round trip when pipelined", async () => {
    expect(await takesPipelinedConnect(proxy, t.url)).toBe(true);
    const fast = await connectAndQuery({ pipelined: true });
    expect(fast.stats).toMatchObject({ connections: 1, roundTrips: 1 });
    // The same server unpipelined waits for its password request first.
    const slow = await connectAndQuery({ pipelined: false });
    expect(slow.stats.roundTrips).toBeGreaterThanOrEqual(2);
  });

  it("adds its delay to every round trip, once per burst", async () => {
    const plain = await connectAndQuery({ pipelined });
    const delayed = await connectAndQuery({ pipelined, delayMs: 40 });
    expect(delayed.stats.roundTrips).toBe(plain.stats.roundTrips);
    expect(delayed.ms).toBeGreaterThanOrEqual(40 * delayed.stats.roundTrips);
  });
});

describe("ws-proxy: the delay keeps order", () => {
  it("releases every chunk in arrival order, at least the delay after it arrived", async () => {
    const delay = delayedInOrder(5);
    const out: number[] = [];
    const arrived: number[] = [];
    const late: number[] = [];
    delay.on("data", (chunk: Buffer) => {
      const n = chunk.readUInt32BE(0);
      out.push(n);
      if (Date.now() - arrived[n]! < 5) late.push(n);
    });
    const ended = new Promise((resolve) => delay.on("end", resolve));
    // Thousands of chunks in one event-loop turn, crossing many millisecond
    // boundaries: with a timer per chunk, delays computed across a boundary fired
    // out of order now and then.
    const spinUntil = Date.now() + 60;
    for (let n = 0; Date.now() < spinUntil || n < 5000; n++) {
      const chunk = Buffer.alloc(4);
      chunk.writeUInt32BE(n);
      arrived[n] = Date.now();
      delay.write(chunk);
    }
    delay.end();
    await ended;
    expect(out).toHaveLength(arrived.length);
    expect(out.every((n, i) => n === i)).toBe(true);
    expect(late).toEqual([]);
  });
});
