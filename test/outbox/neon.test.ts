// The relay as Workers run it: @neondatabase/serverless over WebSockets, here
// through the local WebSocket-to-TCP proxy to real Postgres.
import { Pool } from "@neondatabase/serverless";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { defineSubscriptions, drain, runPass } from "../../src/outbox/index.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
let proxy: WsProxy;
const pools: Pool[] = [];
const neonPool = (max = 1) => {
  const pool = new Pool({ connectionString: t.url, max });
  pool.on("error", () => undefined);
  pools.push(pool);
  return pool;
};

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
  await proxy?.close();
});
beforeEach(() => resetOutbox(t.pool));

describe("relay over the Neon WebSocket driver", () => {
  it("claims, publishes, marks and coalesces exactly as over TCP", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.changed", subject: (i) => (i === 2 ? "b" : "a") });
    const publisher = new RecordingPublisher();
    const subscriptions = defineSubscriptions([
      { name: "mail", types: ["supplier.*"] },
      { name: "index", types: ["*"], coalesce: true },
    ]);
    const pass = await runPass({ pool: neonPool(), publisher, subscriptions });
    expect(pass).toMatchObject({ mode: "batch", claimed: 3, fanned: 3, jobs: 5 });
    const rows = await eventStates(t.pool);
    expect(rows[0]!.fanout).toEqual({ mail: { messageId: "msg_1" }, index: { coalescedInto: rows[2]!.id } });
  });

  it("two relays on separate WebSocket connections never fan out twice", async () => {
    await seedEvents(t.pool, 600);
    const publisher = new RecordingPublisher();
    publisher.delayMs = 2;
    const relays = [neonPool(), neonPool()];
    // Connected before the race starts, so a slow connection cannot leave one relay out.
    await Promise.all(relays.map((pool) => pool.query("SELECT 1")));
    const results = await Promise.all(
      relays.map((pool) =>
        drain({ pool, publisher, subscriptions: everything, batchSize: 25, budgetMs: 60_000 }),
      ),
    );
    expect(results.every((r) => r.fanned > 0)).toBe(true);
    expect([...publisher.countsByDeduplicationId().values()].every((n) => n === 1)).toBe(true);
    expect(publisher.accepted).toHaveLength(600);
    expect(await unfannedCount(t.pool)).toBe(0);
  });

  it("rolls back when the WebSocket connection is cut mid-pass, and republishes the same ids", async () => {
    await seedEvents(t.pool, 2);
    const publisher = new RecordingPublisher();
    publisher.afterAccept = async () => {
      await t.pool.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'`,
      );
    };
    await expect(runPass({ pool: neonPool(), publisher, subscriptions: everything })).rejects.toThrow();
    expect(await unfannedCount(t.pool)).toBe(2);
    publisher.afterAccept = undefined;
    await runPass({ pool: neonPool(), publisher, subscriptions: everything });
    const ids = publisher.accepted.map((j) => j.deduplicationId);
    expect(ids.slice(2)).toEqual(ids.slice(0, 2));
    expect(await unfannedCount(t.pool)).toBe(0);
  });
});
