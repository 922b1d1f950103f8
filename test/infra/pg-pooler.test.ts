import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "@neondatabase/serverless";
import pg from "pg";
import ws from "ws";
import { Framer } from "../../infra/pg-pooler.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";

// The pooler in front of this file's database, reached as the Worker reaches it: the
// Neon driver over the WebSocket proxy, pipelining its connect. Real Postgres, real
// concurrent clients; every wait below waits on a signal (a count, a settled promise).
const t = useTestDatabase();
const MAX = 3;
let proxy: WsProxy;
const live = new Set<Client>();

beforeAll(async () => {
  proxy = await startWsProxy({
    pool: { upstreamUrl: t.url, maxServerConnections: MAX, acquireTimeoutMs: 5_000 },
  });
  // Pipelined whatever the server's own auth: the pooler answers the start-up itself.
  configureNeonForWsProxy(proxy, true);
  await t.pool.query("CREATE TABLE pooled_probe (n int, note text)");
});

afterAll(async () => {
  // Only clients whose connection is still up: a cut one's end() waits for an end that already came.
  await Promise.all([...live].map((c) => c.end().catch(() => undefined)));
  await proxy?.close();
});

function track(client: Client) {
  live.add(client);
  client.on("end", () => live.delete(client));
}

async function connect(url = proxy.pooledUrl!): Promise<Client> {
  const client = new Client({ connectionString: url });
  client.on("error", () => undefined);
  track(client);
  await client.connect();
  // A pipelining client counts itself connected before the answer arrives: the
  // first query is where a refused start-up shows.
  await client.query("SELECT 1");
  return client;
}

const pid = async (c: Client) =>
  (await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;

async function until<T>(what: string, probe: () => T | Promise<T>, ok: (v: T) => boolean): Promise<T> {
  for (let i = 0; i < 500; i++) {
    const value = await probe();
    if (ok(value)) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`never: ${what}`);
}

/** Waits until the backend `backendPid` has exited, then checks its transaction's row `n` never committed. */
async function rolledBackAndGone(backendPid: number, n: number) {
  await until(
    `backend ${backendPid} is gone`,
    async () =>
      (await t.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1", [backendPid]))
        .rows[0].n,
    (count) => count === 0,
  );
  const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM pooled_probe WHERE n = $1", [n]);
  expect(rows[0].n).toBe(0);
}

describe("pg-pooler: start-up answered by the pooler", () => {
  it("connects with the pipelined password and a first query in one round trip", async () => {
    const counted = await startWsProxy({ pool: { upstreamUrl: t.url } });
    configureNeonForWsProxy(counted, true);
    const client = new Client({ connectionString: counted.pooledUrl! });
    try {
      await client.connect();
      const { rows } = await client.query("SELECT 1 + 1 AS two, current_database() AS db");
      expect(rows).toEqual([{ two: 2, db: new URL(t.url).pathname.slice(1) }]);
      expect(counted.stats()).toMatchObject({ connections: 1, roundTrips: 1 });
    } finally {
      await client.end();
      await counted.close();
      configureNeonForWsProxy(proxy, true);
    }
  });

  it("replays the server's ParameterStatus values to every client", async () => {
    const direct = new pg.Client({ connectionString: t.url });
    const fromServer: Record<string, string> = {};
    direct.connection.on("parameterStatus", (m: { parameterName: string; parameterValue: string }) => {
      fromServer[m.parameterName] = m.parameterValue;
    });
    await direct.connect();
    await direct.end();
    const pooled = new Client({ connectionString: proxy.pooledUrl! });
    const fromPooler: Record<string, string> = {};
    pooled.connection.on("parameterStatus", (m: { parameterName: string; parameterValue: string }) => {
      fromPooler[m.parameterName] = m.parameterValue;
    });
    track(pooled);
    await pooled.connect();
    await pooled.query("SELECT 1");
    expect(fromServer.server_version).toBeTruthy();
    for (const name of [
      "server_version",
      "server_encoding",
      "client_encoding",
      "DateStyle",
      "integer_datetimes",
      "standard_conforming_strings",
      "TimeZone",
    ])
      expect(fromPooler[name], name).toBe(fromServer[name]);
  });

  it("refuses a wrong password, user or database before touching a server connection", async () => {
    const opened0 = proxy.stats().pool!.serverConnectionsOpened;
    const wrong = (edit: (u: URL) => void) => {
      const url = new URL(proxy.pooledUrl!);
      edit(url);
      return connect(url.toString());
    };
    await expect(wrong((u) => (u.password = "not-it"))).rejects.toThrow(/password authentication failed/);
    await expect(wrong((u) => (u.username = "someone_else"))).rejects.toThrow(/serves user/);
    await expect(wrong((u) => (u.pathname = "/another_db"))).rejects.toThrow(/serves database/);
    expect(proxy.stats().pool!.serverConnectionsOpened).toBe(opened0);
  });

  it("refuses a client naming another address than its upstream", async () => {
    const socket = new ws(`${proxy.url}?address=127.0.0.1:1`);
    const code = await new Promise<number>((resolve) => socket.on("close", (c) => resolve(c)));
    expect(code).toBe(1008);
  });
});

describe("pg-pooler: transaction mode", () => {
  it("keeps a transaction on one backend and shares backends between transactions", async () => {
    const clients = await Promise.all(Array.from({ length: 12 }, () => connect()));
    const sameBackend = await Promise.all(
      clients.map(async (c, i) => {
        await c.query("BEGIN");
        const first = await pid(c);
        await c.query("INSERT INTO pooled_probe VALUES ($1, 'tx')", [i]);
        // Read-your-own-write: only the transaction's own backend sees the row yet.
        const seen = await c.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pooled_probe WHERE n = $1",
          [i],
        );
        const last = await pid(c);
        await c.query("COMMIT");
        return first === last && seen.rows[0]!.n === 1;
      }),
    );
    expect(sameBackend).toEqual(clients.map(() => true));
    const pool = proxy.stats().pool!;
    // Twelve clients, twelve transactions at once, never more than MAX backends.
    expect(pool.serverConnectionsOpened).toBeLessThanOrEqual(MAX);
    expect(pool.peakWaiting).toBeGreaterThan(0);
    await Promise.all(clients.map((c) => c.end()));
  });

  it("closes a backend left idle past its timeout, and opens one again when needed", async () => {
    // A pooler of its own, with a short timeout; its backends are told apart by application_name.
    const short = await startWsProxy({
      pool: { upstreamUrl: `${t.url}?application_name=idle_probe`, serverIdleTimeoutMs: 300 },
    });
    // The Neon driver reaches one proxy at a time: this one, for this test.
    configureNeonForWsProxy(short, true);
    try {
      const backends = async () =>
        (
          await t.pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'idle_probe'",
          )
        ).rows[0]!.n;
      const clients = await Promise.all([1, 2, 3].map(() => connect(short.pooledUrl!)));
      await Promise.all(clients.map((c) => c.query("SELECT pg_sleep(0.05)")));
      await Promise.all(clients.map((c) => c.end()));
      expect(short.stats().pool!.serverConnections).toBeGreaterThan(0);
      await until(
        "the idle backends closed",
        () => short.stats().pool!.serverConnections,
        (n) => n === 0,
      );
      await until("Postgres saw them go", backends, (n) => n === 0);
      // The pool is not broken by it: the next client gets a fresh backend.
      const again = await connect(short.pooledUrl!);
      expect((await again.query<{ one: number }>("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      await again.end();
    } finally {
      configureNeonForWsProxy(proxy, true);
      await short.close();
    }
  });

  it("makes a client wait while every backend is inside a transaction, then gives it a released one", async () => {
    const holders = await Promise.all(Array.from({ length: MAX }, () => connect()));
    const late = await connect();
    const held: number[] = [];
    for (const h of holders) {
      await h.query("BEGIN");
      await h.query("INSERT INTO pooled_probe VALUES (-1, 'uncommitted')");
      held.push(await pid(h));
    }
    const waiting = late.query<{ n: number; pid: number }>(
      "SELECT count(*)::int AS n, pg_backend_pid() AS pid FROM pooled_probe WHERE n = -1",
    );
    await until(
      "the late client waits",
      () => proxy.stats().pool!.waiting,
      (n) => n === 1,
    );
    await holders[0]!.query("ROLLBACK");
    const { rows } = await waiting;
    // It ran on the backend the rollback released, and saw none of the open transactions' rows.
    expect(rows[0]).toEqual({ n: 0, pid: held[0] });
    for (const h of holders.slice(1)) await h.query("COMMIT");
  });

  it("refuses a client with a clear error when no backend comes free in time", async () => {
    const tight = await startWsProxy({
      pool: { upstreamUrl: t.url, maxServerConnections: 1, acquireTimeoutMs: 200 },
    });
    configureNeonForWsProxy(tight, true);
    try {
      const holder = await connect(tight.pooledUrl!);
      const refused = await connect(tight.pooledUrl!);
      await holder.query("BEGIN");
      await expect(refused.query("SELECT 1")).rejects.toThrow(
        /no server connection free within 200 ms \(all 1 busy\)/,
      );
      expect(tight.stats().pool).toMatchObject({ waitTimeouts: 1, serverConnectionsOpened: 1 });
      await holder.query("COMMIT");
      expect((await (await connect(tight.pooledUrl!)).query("SELECT 7 AS n")).rows).toEqual([{ n: 7 }]);
    } finally {
      await tight.close();
      configureNeonForWsProxy(proxy, true);
    }
  });

  it("closes the backend of a client that leaves inside a transaction: its work is rolled back, never handed on", async () => {
    const leaver = await connect();
    await leaver.query("BEGIN");
    await leaver.query("INSERT INTO pooled_probe VALUES (-2, 'left behind')");
    const leftPid = await pid(leaver);
    const cutBefore = proxy.stats().pool!.closedWhileAttached;
    await leaver.end(); // a Terminate while attached
    await rolledBackAndGone(leftPid, -2);
    expect(proxy.stats().pool!.closedWhileAttached).toBe(cutBefore + 1);
    // No one is handed a backend inside someone else's transaction.
    const next = await connect();
    const status = await next.query<{ xid: string | null }>("SELECT txid_current_if_assigned()::text AS xid");
    expect(status.rows[0]!.xid).toBeNull();
  });

  it("does the same when the client's socket just drops mid-transaction", async () => {
    const dropper = await connect();
    await dropper.query("BEGIN");
    await dropper.query("INSERT INTO pooled_probe VALUES (-3, 'dropped')");
    const droppedPid = await pid(dropper);
    (dropper.connection.stream as unknown as { destroy(): void }).destroy();
    await rolledBackAndGone(droppedPid, -3);
  });

  it("cuts the client attached to a backend that dies, and replaces the backend", async () => {
    const victim = await connect();
    await victim.query("BEGIN");
    await victim.query("SELECT 1 /* pooled-victim */");
    const victimPid = await pid(victim);
    const cut = new Promise<Error>((resolve) => victim.on("error", resolve));
    const ended = new Promise<void>((resolve) => victim.on("end", () => resolve()));
    const { rows } = await t.pool.query<{ ok: boolean }>(
      "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'",
      [victimPid],
    );
    expect(rows[0]?.ok).toBe(true);
    // The client sees its connection end (as the relay's pass does when the chaos suite cuts it)…
    expect((await Promise.race([cut, ended.then(() => new Error("ended"))])).message).toMatch(
      /terminat|ended|connection/i,
    );
    await expect(victim.query("SELECT 1")).rejects.toThrow();
    // …and the next client gets a live backend, not the dead one.
    const next = await connect();
    expect(await pid(next)).not.toBe(victimPid);
  });

  it("forwards a cancel request to the backend the client is attached to", async () => {
    const sleeper = await connect();
    const key = sleeper as unknown as { processID: number; secretKey: number };
    const sleeping = sleeper.query("SELECT pg_sleep(30) /* pooled-cancel */");
    await until(
      "the sleep is running",
      async () =>
        (
          await t.pool.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%pooled-cancel%' AND state = 'active' AND pid <> pg_backend_pid()",
          )
        ).rows[0].n,
      (n) => n === 1,
    );
    const socket = new ws(`${proxy.url}?address=${proxy.pooledUrl ? new URL(proxy.pooledUrl).host : ""}`);
    await new Promise((r) => socket.on("open", r));
    const request = Buffer.alloc(16);
    request.writeInt32BE(16, 0);
    request.writeInt32BE(80877102, 4);
    request.writeInt32BE(key.processID, 8);
    request.writeInt32BE(key.secretKey, 12);
    socket.send(request);
    await expect(sleeping).rejects.toThrow(/canceling statement due to user request/);
    expect(proxy.stats().pool!.cancelRequests).toBe(1);
    // The client goes on, on a backend that is not stuck in anything.
    expect((await sleeper.query("SELECT 5 AS n")).rows).toEqual([{ n: 5 }]);
  });
});

describe("pg-pooler: framing", () => {
  it("finds the same messages however the bytes are split", () => {
    const startup = Buffer.concat([int32(8 + 5), int32(196608), Buffer.from("a\0b\0\0")]);
    const typed = [msg("p", "secret\0"), msg("Q", "SELECT 1\0"), msg("S", ""), msg("X", "")];
    const all = Buffer.concat([startup, ...typed]);
    for (let size = 1; size <= all.length; size++) {
      const framer = new Framer(false);
      const out: Buffer[] = [];
      for (let at = 0; at < all.length; at += size) out.push(...framer.push(all.subarray(at, at + size)));
      expect(
        out.map((b) => b.toString("hex")),
        `chunks of ${size}`,
      ).toEqual([startup, ...typed].map((b) => b.toString("hex")));
    }
  });

  it("refuses a length that cannot be a message", () => {
    expect(() => new Framer(true).push(Buffer.from([0x51, 0, 0, 0, 2]))).toThrow(
      /malformed message length 2/,
    );
  });
});

function int32(n: number) {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}

function msg(type: string, body: string) {
  return Buffer.concat([Buffer.from(type), int32(4 + Buffer.byteLength(body)), Buffer.from(body)]);
}
