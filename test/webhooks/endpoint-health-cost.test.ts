import { drizzle } from "drizzle-orm/node-postgres";
import { beforeAll, describe, expect, it } from "vitest";
import { endpointHealth, endpointHealthQuery } from "../../src/domain/webhooks/delivery-log.ts";
import { useTestDatabase } from "../support/db.ts";

// The Webhooks page, `webhooks list` and an endpoint's page read every endpoint's
// health: a month of deliveries (530k) made that 3–10 s, growing with each endpoint
// (the month walkthrough). What it reads must not grow with the deliveries kept.
const t = useTestDatabase();

interface PlanNode {
  "Shared Hit Blocks"?: number;
  "Shared Read Blocks"?: number;
}

async function blocksRead(endpointId?: string): Promise<number> {
  const { sql, params } = endpointHealthQuery(drizzle(t.pool), endpointId).toSQL();
  const { rows } = await t.pool.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, params);
  const plan = rows[0]["QUERY PLAN"][0].Plan as PlanNode;
  return (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0);
}

/** `n` deliveries of endpoint `url` made `age` ago, each with one attempt then. */
async function deliveries(url: string, n: number, age: string, status = "delivered"): Promise<void> {
  await t.pool.query(
    `WITH made AS (
       INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts,
                                       last_attempt_at, delivered_at, created_at, requested_at)
       SELECT e.id, gen_random_uuid(), 'note.created', repeat('b', 400), $3, 1,
              now() - $4::interval, CASE WHEN $3 = 'delivered' THEN now() - $4::interval END,
              now() - $4::interval, now() - $4::interval
         FROM webhook_endpoints e, generate_series(1, $2::int) WHERE e.url = $1
       RETURNING id, created_at)
     INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status)
     SELECT id, created_at, 40, 200 FROM made`,
    [url, n, status, age],
  );
}

/** The last day's attempts: the rows the health must read, each through its delivery's key. */
const LAST_DAY = 2 * 35;

describe("an endpoint's health costs what the last day holds, not its history", () => {
  beforeAll(async () => {
    await t.pool.query(
      `INSERT INTO webhook_endpoints (url, secret_box)
       SELECT 'https://hooks.example.com/' || i, 'x' FROM generate_series(1, 3) i`,
    );
    for (const url of ["https://hooks.example.com/1", "https://hooks.example.com/2"]) {
      await deliveries(url, 30, "1 hour");
      await deliveries(url, 5, "1 minute", "pending");
    }
    // Twenty days of history, delivered long ago.
    for (const url of ["https://hooks.example.com/1", "https://hooks.example.com/2"])
      await deliveries(url, 20_000, "20 days");
    await t.pool.query("VACUUM ANALYZE webhook_deliveries, webhook_attempts");
  });

  it("reads a few blocks per attempt of the last day, whatever 40,000 old deliveries hold", async () => {
    // An index probe is ~3 blocks; the history's deliveries alone fill ~1,600, and a
    // read of them (the statement before this one hash-joined them) shows.
    const bound = LAST_DAY * 4 + 60;
    expect(await blocksRead()).toBeLessThan(bound);
    const one = (await t.pool.query(`SELECT id FROM webhook_endpoints WHERE url LIKE '%/1'`)).rows[0].id;
    expect(await blocksRead(one)).toBeLessThan(bound);
  });

  it("still counts the last day's attempts, and the pending and failed deliveries", async () => {
    const health = await endpointHealth(drizzle(t.pool));
    const byUrl = new Map(health.map((h) => [h.url, h]));
    expect(byUrl.get("https://hooks.example.com/1")).toMatchObject({
      attempts24h: 35,
      succeeded24h: 35,
      pending: 5,
      failed: 0,
    });
    expect(byUrl.get("https://hooks.example.com/3")).toMatchObject({ attempts24h: 0, pending: 0 });
  });
});
