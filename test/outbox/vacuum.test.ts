// The cron sweep's VACUUM of `events`, through the Neon WebSocket driver as the
// Worker runs it: VACUUM refuses to run inside a transaction block, so this is
// also the check that the driver sends it as a plain statement.
import { Pool } from "@neondatabase/serverless";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { vacuumEventsIfNeeded } from "../../src/outbox/index.ts";
import { claimSql } from "../../src/outbox/relay/claim.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
let proxy: WsProxy;
let neon: Pool;

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  neon = new Pool({ connectionString: t.url, max: 1 });
  neon.on("error", () => undefined);
  await resetOutbox(t.pool);
  // Autovacuum (on in CI's embedded Postgres) must not do the work this test expects of the sweep.
  await t.pool.query("ALTER TABLE events SET (autovacuum_enabled = false)");
});
afterAll(async () => {
  await neon?.end().catch(() => undefined);
  await proxy?.close();
});

async function deadTuples(): Promise<number> {
  const { rows } = await t.pool.query<{ dead: number }>(
    `SELECT n_dead_tup::int AS dead FROM pg_stat_user_tables WHERE relid = 'events'::regclass`,
  );
  return rows[0]!.dead;
}

async function manualVacuums(): Promise<number> {
  const { rows } = await t.pool.query<{ n: number }>(
    `SELECT vacuum_count::int AS n FROM pg_stat_user_tables WHERE relid = 'events'::regclass`,
  );
  return rows[0]!.n;
}

/** Buffers the claim touches: it walks dead index entries until VACUUM removes them. */
async function claimBuffers(): Promise<number> {
  const client = await t.pool.connect();
  try {
    await client.query("BEGIN");
    const { rows } = await client.query(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${claimSql(200, undefined)}`,
    );
    const plan = rows[0]["QUERY PLAN"][0].Plan as {
      "Shared Hit Blocks": number;
      "Shared Read Blocks": number;
    };
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"];
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
}

/** Marks the oldest n pending rows fanned, as a drain does, and makes the statistics see it. */
async function fanOldest(n: number) {
  const client = await t.pool.connect();
  try {
    await client.query(
      `UPDATE events SET fanned_out_at = now(), fanout = '{}'
        WHERE seq IN (SELECT seq FROM events WHERE fanned_out_at IS NULL ORDER BY seq LIMIT $1)`,
      [n],
    );
    // Statistics reach shared memory lazily; ask this backend to flush when idle.
    await client.query("SELECT pg_stat_force_next_flush()");
  } finally {
    client.release();
  }
}

describe("the sweep vacuums events once enough is dead", () => {
  it("leaves a table with few dead rows alone", async () => {
    await seedEvents(t.pool, 1_000);
    await fanOldest(500);
    await waitFor(async () => (await deadTuples()) >= 500);
    const result = await vacuumEventsIfNeeded(neon, { minDeadTuples: 10_000 });
    expect(result).toEqual({ deadTuples: expect.any(Number), vacuumed: false });
    expect(await manualVacuums()).toBe(0);
  });

  it("vacuums past the threshold, over the Neon driver, and the claim stops walking dead entries", async () => {
    await resetOutbox(t.pool);
    await seedEvents(t.pool, 20_000);
    await t.pool.query("VACUUM events");
    const clean = await claimBuffers();
    await fanOldest(19_000);
    await waitFor(async () => (await deadTuples()) >= 19_000);
    const dirty = await claimBuffers();
    const vacuumsBefore = await manualVacuums();

    const result = await vacuumEventsIfNeeded(neon, { minDeadTuples: 10_000 });
    expect(result.vacuumed).toBe(true);
    expect(result.deadTuples).toBeGreaterThanOrEqual(19_000);
    await waitFor(async () => (await manualVacuums()) === vacuumsBefore + 1);

    // Exact buffer counts, not timings: 19,000 dead entries at the head of the
    // partial index cost the claim extra pages until VACUUM removes them.
    expect(dirty).toBeGreaterThan(clean + 40);
    expect(await claimBuffers()).toBeLessThanOrEqual(clean + 10);
  });
});
