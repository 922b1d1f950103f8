// The claim leaves rows other passes hold to a snapshot test, before the row lock
// (ADR 0024): real transactions on separate connections hold rows, and the claim
// must take the next free ones without asking the lock manager for the held ones,
// and must still take every row whose holder has gone, however it went.
import type pg from "pg";
import { beforeEach, describe, expect, it } from "vitest";
import { claim, claimSql, fullXidSql } from "../../src/outbox/relay/claim.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Actual Rows"?: number;
  "Rows Removed by Filter"?: number;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** A transaction on a connection of its own that claims `limit` rows and keeps them. */
async function holder(limit: number): Promise<pg.PoolClient> {
  const client = await t.newPool(1).connect();
  await client.query("BEGIN");
  const { rowCount } = await client.query(claimSql(limit, undefined));
  expect(rowCount).toBe(limit);
  return client;
}

async function claimedSeqs(limit: number): Promise<number[]> {
  const client = await t.pool.connect();
  try {
    await client.query("BEGIN");
    const { rows } = await client.query<{ seq: string }>(claimSql(limit, undefined));
    return rows.map((r) => Number(r.seq));
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
}

const seqRange = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe("the claim skips rows other passes hold by their snapshot, not their lock", () => {
  it("rows held by three running passes are filtered out before the row lock, and the next free ones are claimed", async () => {
    await seedEvents(t.pool, 1_000);
    const holders = [await holder(200), await holder(200), await holder(200)];
    try {
      const client = await t.pool.connect();
      try {
        await client.query("BEGIN");
        const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${claimSql(200, undefined)}`);
        const plan = nodes(rows[0]["QUERY PLAN"][0].Plan as PlanNode);
        const scan = plan.find((n) => n["Relation Name"] === "events")!;
        const lockRows = plan.find((n) => n["Node Type"] === "LockRows")!;
        // The 600 held rows never reach LockRows: the scan's filter drops them, so the
        // lock manager is asked for the 200 rows the claim takes and no others.
        expect(scan["Rows Removed by Filter"]).toBe(600);
        expect(scan["Actual Rows"]).toBe(200);
        expect(lockRows["Actual Rows"]).toBe(200);
      } finally {
        await client.query("ROLLBACK");
        client.release();
      }
      expect(await claimedSeqs(200)).toEqual(seqRange(601, 800));
    } finally {
      for (const h of holders) {
        await h.query("ROLLBACK");
        h.release();
      }
    }
  });

  it("takes back, in seq order, rows whose holder rolled back, committed without changing them, or lost its connection", async () => {
    await seedEvents(t.pool, 700);
    const rolledBack = await holder(200);
    const committed = await holder(200);
    const cut = await holder(200);
    const cutPid = (await cut.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
    cut.on("error", () => undefined); // its connection is cut on purpose below
    // Each leaves its rows' xmax naming a transaction that is over, in its own way.
    await rolledBack.query("ROLLBACK");
    await committed.query("COMMIT");
    await t.pool.query("SELECT pg_terminate_backend($1)", [cutPid]);
    // The server notices the cut and ends the backend, rolling its transaction back.
    await waitFor(
      async () =>
        (await t.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [cutPid])).rowCount === 0,
    );
    rolledBack.release();
    committed.release();
    cut.release(true);
    expect(await claimedSeqs(700)).toEqual(seqRange(1, 700));
  });

  it("never returns a row that is already held, its own transaction's included", async () => {
    await seedEvents(t.pool, 300);
    const client = await t.pool.connect();
    try {
      await client.query("BEGIN");
      const first = await client.query<{ seq: string }>(claimSql(100, undefined));
      // SKIP LOCKED alone would return rows 1-100 again (a transaction may lock its own
      // rows twice); held by a running transaction, they are filtered out like anyone's.
      // The relay claims once per transaction, so nothing relies on either behaviour.
      const again = await client.query<{ seq: string }>(claimSql(100, undefined));
      expect(first.rows.map((r) => Number(r.seq))).toEqual(seqRange(1, 100));
      expect(again.rows.map((r) => Number(r.seq))).toEqual(seqRange(101, 200));
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
  });

  it("a held row the snapshot test lets through is still skipped by the row lock, not waited for", async () => {
    // The snapshot test cannot see every holder: pg_current_snapshot() lists running
    // top-level transactions only, so a row locked inside a subtransaction reads as
    // free once a later transaction has completed (the snapshot's xmax is past it).
    // SKIP LOCKED is what keeps the claim from queueing behind such a row, or behind
    // one locked between the claim's snapshot and its row lock.
    await seedEvents(t.pool, 5);
    const held = await t.newPool(1).connect();
    const claimer = await t.newPool(1).connect();
    try {
      await held.query("BEGIN");
      await held.query("SAVEPOINT s");
      const locked = await held.query<{ seq: string }>(
        `SELECT seq FROM events WHERE fanned_out_at IS NULL ORDER BY seq LIMIT 1 FOR UPDATE`,
      );
      expect(locked.rows.map((r) => Number(r.seq))).toEqual([1]);
      // A transaction that starts and commits after the holder's: the snapshot's xmax
      // moves past the subtransaction's xid, so the filter no longer hides row 1.
      await t.pool.query("SELECT txid_current()");
      // A claim that waited for row 1 would fail here instead of hanging the test.
      await claimer.query("SET lock_timeout = '2s'");
      const { events } = await claim(claimer, 10, undefined);
      expect(events.map((e) => e.seq)).toEqual([2, 3, 4, 5]);
    } finally {
      await claimer.query("ROLLBACK").catch(() => undefined);
      claimer.release(true);
      await held.query("ROLLBACK");
      held.release(true);
    }
  });

  it("only the relay's own row lock ever sets an events row's xmax: no foreign key references events", async () => {
    // A key-share lock from a referencing table could make xmax a MultiXactId, which
    // the filter would read as an xid.
    const { rows } = await t.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_constraint WHERE confrelid = 'events'::regclass",
    );
    expect(rows[0]!.n).toBe(0);
  });
});

describe("fullXidSql places a 32-bit xid in the epoch nearest a 64-bit one", () => {
  const E = 2 ** 32;
  const cases: [string, number, number, number][] = [
    ["the same xid", 1_000, 1_000, 1_000],
    ["a little after", 1_005, 1_000, 1_005],
    ["a little before", 995, 1_000, 995],
    ["epoch 3, before", 3 * E + 4_000_000_000 - 10, 3 * E + 4_000_000_000, 3 * E + 4_000_000_000 - 10],
    ["just past an epoch boundary", 3, 4 * E - 2, 4 * E + 3],
    ["just before an epoch boundary", E - 3, 4 * E + 2, 4 * E - 3],
    ["2^31 - 1 ahead", 1_000 + 2 ** 31 - 1, 5 * E + 1_000, 5 * E + 1_000 + 2 ** 31 - 1],
  ];
  it.each(cases)("%s", async (_name, xid64, near64, expected) => {
    const xid32 = xid64 % E;
    const { rows } = await t.pool.query<{ full: string }>(
      `SELECT ${fullXidSql(`${xid32}::bigint`, `${near64}::bigint`)}::text AS full`,
    );
    expect(rows[0]!.full).toBe(String(expected));
  });
});
