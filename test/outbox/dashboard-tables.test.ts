// Migration 0010 (ADR 0016): what only the dashboard reads lives off `events`, so the
// relay's mark updates no index of it: the events page's keys in events_browse,
// written with each event and deleted with it, and the overview's fanned-per-minute
// counts in outbox_fanned_minutes, added once per pass in the pass's transaction.
import { beforeEach, describe, expect, it } from "vitest";
import {
  deleteOldFannedEvents,
  drain,
  eventsPerMinute,
  recordEvent,
  runPass,
  type DrainResult,
} from "../../src/outbox/index.ts";
import { clearFailuresSql } from "../../src/outbox/relay/backoff.ts";
import { markAndCommit, type RowOutcome } from "../../src/outbox/relay/mark.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { RecordingPublisher, outage } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

/** Each event's keys as events holds them and as events_browse does, by seq. */
async function keys() {
  const read = async (table: string) =>
    (
      await t.pool.query<{
        seq: string;
        id: string;
        type: string;
        subject: string;
        scope: string | null;
        created_at: Date;
      }>(`SELECT seq, id, type, subject, scope, created_at FROM ${table} ORDER BY seq`)
    ).rows;
  return { events: await read("events"), browse: await read("events_browse") };
}

/** The chart's fanned total over the last hour. */
async function chartedFanned(): Promise<number> {
  return (await eventsPerMinute(t.pool)).reduce((sum, m) => sum + m.fanned, 0);
}

describe("events_browse: every event's id and the events page's keys", () => {
  it("is written by every insert path, in the writer's statement", async () => {
    await seedEvents(t.pool, 20, { scope: "tenant-a" });
    await t.db.transaction(async (tx) => {
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-1", scope: "tenant-b" });
    });
    // The notes table's trigger records its event by an INSERT of its own.
    await t.pool.query(`INSERT INTO corpus_notes (title, body, scope) VALUES ('A note', 'body', 'tenant-c')`);
    const { events, browse } = await keys();
    expect(events).toHaveLength(22);
    expect(browse).toEqual(events);
  });

  it("is not written when the writer's transaction rolls back", async () => {
    await seedEvents(t.pool, 3);
    await t.db
      .transaction(async (tx) => {
        await recordEvent(tx, { type: "supplier.connected", subject: "sup-1" });
        throw new Error("the change failed");
      })
      .catch(() => undefined);
    const { events, browse } = await keys();
    expect(events).toHaveLength(3);
    expect(browse).toEqual(events);
  });

  it("follows an operator's correction of an event's keys, and not the relay's mark", async () => {
    const ids = await seedEvents(t.pool, 4);
    await t.pool.query(
      `UPDATE events SET type = 'test.renamed', subject = 'other', scope = 'tenant-z',
              created_at = now() - interval '3 days', id = $2 WHERE id = $1`,
      [ids[1], "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"],
    );
    await drain({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      budgetMs: 30_000,
    });
    const { events, browse } = await keys();
    expect(events.find((e) => e.type === "test.renamed")).toMatchObject({
      id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
      subject: "other",
      scope: "tenant-z",
    });
    expect(browse).toEqual(events);
  });

  it("loses the rows retention deletes, and keeps every other", async () => {
    const old = await seedEvents(t.pool, 30, { fanned: true });
    await seedEvents(t.pool, 5);
    await t.pool.query(
      `UPDATE events SET created_at = now() - interval '60 days', fanned_out_at = now() - interval '50 days'
        WHERE id = ANY($1::uuid[])`,
      [old],
    );
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 7 })).toBe(30);
    const { events, browse } = await keys();
    expect(events).toHaveLength(5);
    expect(browse).toEqual(events);
  });

  it("is emptied with events, so restarted seqs never meet stale keys", async () => {
    await seedEvents(t.pool, 5, { type: "test.before" });
    await resetOutbox(t.pool); // TRUNCATE events … RESTART IDENTITY
    await seedEvents(t.pool, 2, { type: "test.after" });
    const { events, browse } = await keys();
    expect(browse).toEqual(events);
    expect(browse.map((r) => r.type)).toEqual(["test.after", "test.after"]);
  });

  it("leaves events with only the relay's indexes, which are all the mark updates", async () => {
    const { rows } = await t.pool.query<{ name: string }>(
      `SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = 'events'::regclass ORDER BY 1`,
    );
    // The primary key, the claim's partial index, which a marked row leaves, and the
    // poisoned rows' partial index, which a fanned row never enters. The unique id is
    // events_browse's (docs/adr/0021).
    expect(rows.map((r) => r.name)).toEqual([
      "events_pkey",
      "events_poisoned_idx",
      "events_unfanned_seq_idx",
    ]);
  });
});

describe("the overview's fanned-per-minute counts", () => {
  it("count every row a pass fans, in the pass's minute", async () => {
    await seedEvents(t.pool, 250);
    await drain({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      batchSize: 100,
      budgetMs: 30_000,
    });
    const chart = await eventsPerMinute(t.pool);
    expect(chart.reduce((sum, m) => sum + m.fanned, 0)).toBe(250);
    expect(chart.reduce((sum, m) => sum + m.recorded, 0)).toBe(250);
    // The minutes the passes ran in, which now() of the pass's transaction decides.
    const { rows } = await t.pool.query<{ minute: Date; n: number }>(
      `SELECT date_trunc('minute', fanned_out_at) AS minute, count(*)::int AS n FROM events GROUP BY 1 ORDER BY 1`,
    );
    for (const { minute, n } of rows) {
      expect(chart.find((m) => m.minute.getTime() === minute.getTime())?.fanned).toBe(n);
    }
  });

  it("count nothing for a pass that rolled back", async () => {
    await seedEvents(t.pool, 10);
    const publisher = new RecordingPublisher();
    publisher.fail = () => outage();
    const result = await runPass({ pool: t.pool, publisher, subscriptions: everything });
    expect(result.fanned).toBe(0);
    expect(await chartedFanned()).toBe(0);
  });

  it("count the fanned rows of both mark statements, and not the failed ones", async () => {
    await seedEvents(t.pool, 12);
    const seqs = (await t.pool.query<{ seq: string }>(`SELECT seq FROM events ORDER BY seq`)).rows.map((r) =>
      Number(r.seq),
    );
    const fanout = { all: { messageId: "msg_1" } };
    // All published: the compact statement.
    await mark(seqs.slice(0, 5).map((seq) => ({ seq, fanout })));
    expect(await chartedFanned()).toBe(5);
    // One failed row: the general statement.
    await mark([
      ...seqs.slice(5, 11).map((seq) => ({ seq, fanout })),
      { seq: seqs[11]!, error: "rejected: 400" },
    ]);
    expect(await chartedFanned()).toBe(11);
  });

  it("count rows recorded already fanned (imports, back-dated histories) in their own minute", async () => {
    // One moment, read once: a minute boundary between the insert and a second now()
    // made the test look up the wrong minute (it failed once in CI that way).
    const { rows } = await t.pool.query<{ at: Date; minute: Date }>(
      `SELECT now() - interval '19 minutes' AS at, date_trunc('minute', now() - interval '19 minutes') AS minute`,
    );
    await t.pool.query(
      `INSERT INTO events (type, subject, payload, created_at, fanned_out_at, fanout)
       SELECT 'test.imported', 'h-' || g, '{}', $1::timestamptz - interval '1 minute', $1::timestamptz, '{}'
         FROM generate_series(1, 5000) g`,
      [rows[0]!.at],
    );
    // An ordinary write, never fanned, counts nothing.
    await seedEvents(t.pool, 3);
    const chart = await eventsPerMinute(t.pool);
    expect(chart.reduce((sum, m) => sum + m.fanned, 0)).toBe(5000);
    expect(chart.find((m) => m.minute.getTime() === rows[0]!.minute.getTime())?.fanned).toBe(5000);
  });

  it("lose no pass's count when 4 relays fan out at once", async () => {
    const n = 3000;
    await seedEvents(t.pool, n);
    const publisher = new RecordingPublisher();
    publisher.delayMs = 2;
    const relays = Array.from({ length: 4 }, () => t.newPool(1));
    await Promise.all(relays.map((pool) => pool.query("SELECT 1")));
    const results: DrainResult[] = await Promise.all(
      relays.map((pool) =>
        drain({ pool, publisher, subscriptions: everything, batchSize: 50, budgetMs: 120_000 }),
      ),
    );
    expect(results.every((r) => r.fanned > 0)).toBe(true);
    expect(results.reduce((sum, r) => sum + r.fanned, 0)).toBe(n);
    expect(await chartedFanned()).toBe(n);
  });

  it("go at retention's cutoff, like the events they counted", async () => {
    await t.pool.query(
      `INSERT INTO outbox_fanned_minutes (minute, slot, fanned)
       VALUES (date_trunc('minute', now() - interval '40 days'), 0, 5),
              (date_trunc('minute', now() - interval '2 days'), 0, 6)`,
    );
    await deleteOldFannedEvents(t.pool, { olderThanDays: 30 });
    const { rows } = await t.pool.query<{ fanned: string }>(`SELECT fanned FROM outbox_fanned_minutes`);
    expect(rows.map((r) => Number(r.fanned))).toEqual([6]);
  });
});

async function mark(outcomes: RowOutcome[]) {
  const client = await t.pool.connect();
  try {
    await client.query("BEGIN");
    await markAndCommit(client, outcomes, clearFailuresSql(undefined), undefined);
  } finally {
    client.release();
  }
}
