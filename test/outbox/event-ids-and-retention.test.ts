// Migration 0007 (ADR 0014): event ids are time-ordered UUIDv7 built in the database,
// and retention finds old fanned rows on the primary key, without an index on them.
// Migration 0011 (ADR 0021): ids are unique and indexed on events_browse, not events.
import { beforeEach, describe, expect, it } from "vitest";
import { deleteOldFannedEvents } from "../../src/outbox/index.ts";
import { retentionBatchSql } from "../../src/outbox/maintenance.ts";
import { idsSql } from "../../src/outbox/state.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("event ids", () => {
  it("are RFC 9562 version 7 UUIDs whose first 48 bits are the millisecond they were made", async () => {
    const before = Date.now();
    const [id] = await seedEvents(t.pool, 1);
    const after = Date.now();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const ms = parseInt(id!.replace(/-/g, "").slice(0, 12), 16);
    // The database's clock and this process's are the same machine's.
    expect(ms).toBeGreaterThanOrEqual(before - 5);
    expect(ms).toBeLessThanOrEqual(after + 5);
  });

  it("sort in recording order across transactions, and are distinct within one", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push(...(await seedEvents(t.pool, 1)));
      await sleep(3);
    }
    expect([...ids].sort()).toEqual(ids);
    const many = await seedEvents(t.pool, 5000);
    expect(new Set(many).size).toBe(5000);
    // Within one statement the clock still moves on: the ids are ordered to the millisecond.
    const prefixes = many.map((id) => id.slice(0, 13));
    expect([...prefixes].sort()).toEqual(prefixes);
  });
});

describe("event ids, indexed off events", () => {
  it("stay unique: a second event with a taken id is refused and leaves nothing behind", async () => {
    const [taken] = await seedEvents(t.pool, 1);
    const insert = t.pool.query(
      `INSERT INTO events (id, type, subject) VALUES ($1, 'test.copy', 'c'), (outbox_uuid_v7(), 'test.other', 'o')`,
      [taken],
    );
    await expect(insert).rejects.toMatchObject({ code: "23505", constraint: "events_browse_id_unique" });
    const [other] = await seedEvents(t.pool, 1);
    // A correction to a taken id too.
    await expect(
      t.pool.query(`UPDATE events SET id = $1 WHERE id = $2`, [taken, other]),
    ).rejects.toMatchObject({
      code: "23505",
    });
    expect((await eventStates(t.pool)).map((e) => e.id)).toEqual([taken, other]);
  });

  it("are found by two index probes, events_browse's id then events' primary key, never a scan", async () => {
    const ids = await seedEvents(t.pool, 3000, { fanned: true });
    await t.pool.query(`ANALYZE events; ANALYZE events_browse`);
    const wanted = [ids[5], ids[1500], ids[2999]];
    const { rows } = await t.pool.query<{ "QUERY PLAN": string }>(
      `EXPLAIN SELECT id FROM events WHERE ${idsSql("$1")}`,
      [wanted],
    );
    const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
    expect(plan).toContain("events_browse_id_unique");
    expect(plan).toContain("events_pkey");
    expect(plan).not.toContain("Seq Scan");
    const found = await t.pool.query<{ id: string }>(
      `SELECT id FROM events WHERE ${idsSql("$1")} ORDER BY seq`,
      [wanted],
    );
    expect(found.rows.map((r) => r.id)).toEqual(wanted);
  });

  it("take no index entry on events when the relay marks a row", async () => {
    // What the move buys: the mark is a non-HOT update, so an index on events.id
    // got a new entry (and a uniqueness check) per marked row.
    const { rows } = await t.pool.query<{ def: string }>(
      `SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid = 'events'::regclass`,
    );
    expect(rows.some((r) => /\(id\)/.test(r.def))).toBe(false);
  });
});

describe("retention without an index on fanned rows", () => {
  const old = (days: number) => `now() - make_interval(days => ${days})`;

  async function age(ids: string[], createdDaysAgo: number, fannedDaysAgo?: number) {
    await t.pool.query(
      `UPDATE events SET created_at = ${old(createdDaysAgo)}
         ${fannedDaysAgo === undefined ? "" : `, fanned_out_at = ${old(fannedDaysAgo)}`}
       WHERE id = ANY($1::uuid[])`,
      [ids],
    );
  }

  it("deletes exactly the fanned rows fanned before the cutoff, oldest seq first", async () => {
    const oldFanned = await seedEvents(t.pool, 30, { fanned: true });
    const [pending, poisoned] = await seedEvents(t.pool, 2);
    const [lateFanned] = await seedEvents(t.pool, 1, { fanned: true });
    const young = await seedEvents(t.pool, 10, { fanned: true });
    const youngPending = await seedEvents(t.pool, 3);
    await age(oldFanned, 60, 50);
    await age([pending!, poisoned!], 60);
    await t.pool.query(`UPDATE events SET poisoned_at = ${old(59)} WHERE id = $1`, [poisoned]);
    // Recorded long ago but fanned recently (e.g. requeued): younger than the cutoff.
    await age([lateFanned!], 60, 1);
    await age(young, 2, 2);

    // Two batches of 12: the 24 lowest seqs of the old fanned rows go first.
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 12, maxBatches: 2 })).toBe(24);
    expect((await eventStates(t.pool)).map((e) => e.id).slice(0, 6)).toEqual(oldFanned.slice(24));
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 12, maxBatches: 2 })).toBe(6);
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30 })).toBe(0);
    expect((await eventStates(t.pool)).map((e) => e.id)).toEqual([
      pending,
      poisoned,
      lateFanned,
      ...young,
      ...youngPending,
    ]);
  });

  it("walks past more old pending and poisoned rows than one batch holds", async () => {
    const stuck = await seedEvents(t.pool, 40);
    const oldFanned = await seedEvents(t.pool, 5, { fanned: true });
    await age(stuck, 40);
    await t.pool.query(`UPDATE events SET poisoned_at = ${old(39)} WHERE id = ANY($1::uuid[])`, [
      stuck.slice(0, 20),
    ]);
    await age(oldFanned, 40, 35);
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 10, maxBatches: 1 })).toBe(5);
    expect((await eventStates(t.pool)).map((e) => e.id)).toEqual(stuck);
  });

  it("deletes nothing on an empty table or when every row is younger than the cutoff", async () => {
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 1 })).toBe(0);
    await seedEvents(t.pool, 5, { fanned: true });
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 1 })).toBe(0);
    expect(await eventStates(t.pool)).toHaveLength(5);
  });

  it("keeps a row recorded before the cutoff but inserted after younger rows until the cutoff passes them", async () => {
    // seq order and recording order disagree for a transaction that inserted late.
    const young = await seedEvents(t.pool, 3, { fanned: true });
    const [straggler] = await seedEvents(t.pool, 1, { fanned: true });
    await age(young, 20, 20);
    await age([straggler!], 40, 35);
    // The search's bound stops below the young rows, so the straggler waits...
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30 })).toBe(0);
    // ...and goes once the cutoff has passed the rows recorded before it.
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 10 })).toBe(4);
    expect(await eventStates(t.pool)).toEqual([]);
  });

  it("reads the primary key, not the whole table", async () => {
    await seedEvents(t.pool, 2000, { fanned: true });
    await t.pool.query(`ANALYZE events`);
    const { rows } = await t.pool.query<{ "QUERY PLAN": string }>(`EXPLAIN ${retentionBatchSql}`, [
      "0",
      "1000",
      new Date(),
      100,
    ]);
    const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
    expect(plan).toContain("events_pkey");
    expect(plan).not.toContain("Seq Scan");
  });
});
