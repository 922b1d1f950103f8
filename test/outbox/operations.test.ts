import { sql } from "drizzle-orm";
import { beforeEach, describe, expect, it } from "vitest";
import {
  NonRetryableError,
  awaitFanout,
  countPoisoned,
  deleteOldFannedEvents,
  evaluateAlerts,
  listAlerts,
  parseJobBody,
  readReceipt,
  requeuePoisoned,
  requeuePoisonedInRounds,
  runJob,
  runPass,
} from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, poisonEvents, seedEvents } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("write receipts", () => {
  it("report each event's fan-out once a pass has run, and are incomplete before", async () => {
    const ids = await seedEvents(t.pool, 2);
    expect((await readReceipt(t.pool, ids)).complete).toBe(false);
    const kicked = runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions: everything });
    const receipt = await awaitFanout(t.pool, ids, { deadline: Date.now() + 5000, kicked });
    expect(receipt.complete).toBe(true);
    expect(receipt.events.map((e) => [e.id, e.fanout])).toEqual([
      [ids[0], { all: { messageId: "msg_1" } }],
      [ids[1], { all: { messageId: "msg_2" } }],
    ]);
  });

  it("poll only the events not fanned out yet, less often as the wait goes on", async () => {
    const ids = await seedEvents(t.pool, 3);
    // Two of the three fanned out before the wait; the third never is.
    await t.pool.query("UPDATE events SET fanned_out_at = now(), fanout = '{}' WHERE id = ANY($1::uuid[])", [
      ids.slice(0, 2),
    ]);
    const asked: string[][] = [];
    const counted = {
      query: (text: string, values?: unknown[]) => {
        asked.push([...(values?.[0] as string[])]);
        return t.pool.query(text, values);
      },
    };
    const receipt = await awaitFanout(counted, ids, { deadline: Date.now() + 1_500 });
    expect(receipt.complete).toBe(false);
    // The answer still lists every event, in the write's order, the fanned ones as read.
    expect(receipt.events.map((e) => [e.id, e.fannedOutAt !== null])).toEqual([
      [ids[0], true],
      [ids[1], true],
      [ids[2], false],
    ]);
    expect(asked[0]).toEqual(ids);
    for (const later of asked.slice(1)) expect(later).toEqual([ids[2]]);
    // Every 50 ms for the first 500 ms, then waits of 100, 200, 400… ms: at most 15 reads
    // in 1.5 s (every 50 ms was 30), fewer the longer the wait.
    expect(asked.length).toBeLessThanOrEqual(15);
  });

  it("give up at the deadline when nothing fans the events out", async () => {
    const ids = await seedEvents(t.pool, 1);
    const started = Date.now();
    const receipt = await awaitFanout(t.pool, ids, { deadline: started + 200, pollMs: 20 });
    expect(receipt.complete).toBe(false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
  });
});

describe("retention", () => {
  it("deletes old fanned events in bounded batches, never pending or poisoned ones", async () => {
    await seedEvents(t.pool, 25, { fanned: true });
    const [pending, poisoned] = await seedEvents(t.pool, 2);
    await t.pool.query(`UPDATE events SET poisoned_at = now() WHERE id = $1`, [poisoned]);
    await t.pool.query(`UPDATE events SET created_at = now() - interval '60 days'`);
    await t.pool.query(
      `UPDATE events SET fanned_out_at = now() - interval '40 days' WHERE fanned_out_at IS NOT NULL`,
    );
    // Two batches of 10 allowed: 20 go now, the other 5 on the next sweep.
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 10, maxBatches: 2 })).toBe(20);
    expect(await deleteOldFannedEvents(t.pool, { olderThanDays: 30, batchSize: 10, maxBatches: 2 })).toBe(5);
    expect((await eventStates(t.pool)).map((e) => e.id)).toEqual([pending, poisoned]);
  });
});

describe("requeueing every poisoned event", () => {
  const poisonAt = (ids: string[], at: string) => poisonEvents(t.pool, ids, at);
  const stateOf = async (ids: string[]) =>
    (
      await t.pool.query<{ id: string; poisoned: boolean; attempts: number; alert_open: boolean }>(
        `SELECT e.id, e.poisoned_at IS NOT NULL AS poisoned, e.attempts,
                EXISTS (SELECT 1 FROM outbox_alerts a WHERE a.event_id = e.id AND a.resolved_at IS NULL) AS alert_open
           FROM events e WHERE e.id = ANY($1::uuid[]) ORDER BY e.seq`,
        [ids],
      )
    ).rows;

  it("puts back, oldest first and a batch at a time, those poisoned up to the time given, of the type given", async () => {
    const suppliers = await seedEvents(t.pool, 5, { type: "supplier.connected" });
    const ledger = await seedEvents(t.pool, 2, { type: "ledger.posted" });
    const [late] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
    const [pending] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
    const [fanned] = await seedEvents(t.pool, 1, { type: "supplier.connected", fanned: true });
    const upTo = "2026-12-05 18:00:00+00";
    // Poisoned oldest last in seq order, so "oldest first" is the poisoning's order, not the table's.
    for (const [i, id] of suppliers.entries()) await poisonAt([id], `2026-12-05 17:5${5 - i}:00+00`);
    await poisonAt(ledger, "2026-12-05 17:59:00+00");
    // Poisoned again after the operator looked: not put back unseen.
    await poisonAt([late!], "2026-12-05 18:00:00.000001+00");

    expect(await countPoisoned(t.pool, { upTo })).toEqual({ upTo: "2026-12-05T18:00:00.000000Z", count: 7 });
    expect((await countPoisoned(t.pool, { upTo, type: "supplier.*" })).count).toBe(5);
    // Without a time: the database's clock, to the microsecond, which takes the late one too.
    const now = await countPoisoned(t.pool);
    expect(now.upTo).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(now.count).toBe(8);
    expect(await requeuePoisoned(t.pool, { upTo, type: "supplier.*", limit: 2 })).toEqual({
      requeued: 2,
      more: true,
    });
    expect((await stateOf(suppliers)).map((r) => r.poisoned)).toEqual([true, true, true, false, false]);
    expect(await requeuePoisoned(t.pool, { upTo, type: "supplier.*", limit: 2 })).toEqual({
      requeued: 2,
      more: true,
    });
    expect(await requeuePoisoned(t.pool, { upTo, type: "supplier.*", limit: 2 })).toEqual({
      requeued: 1,
      more: false,
    });
    expect(await stateOf(suppliers)).toEqual(
      suppliers.map((id) => ({ id, poisoned: false, attempts: 0, alert_open: false })),
    );
    expect((await stateOf(ledger)).map((r) => r.poisoned)).toEqual([true, true]);

    expect(await requeuePoisoned(t.pool, { upTo })).toEqual({ requeued: 2, more: false });
    expect(await requeuePoisoned(t.pool, { upTo })).toEqual({ requeued: 0, more: false });
    expect(await stateOf([late!, pending!, fanned!])).toEqual([
      { id: late, poisoned: true, attempts: 5, alert_open: true },
      { id: pending, poisoned: false, attempts: 0, alert_open: false },
      { id: fanned, poisoned: false, attempts: 0, alert_open: false },
    ]);
    const { rows } = await t.pool.query(
      `SELECT fanned_out_at IS NOT NULL AS fanned FROM events WHERE id = $1`,
      [fanned],
    );
    expect(rows[0].fanned).toBe(true);
  });

  it("two operators requeueing at once take different rows, and put each event back once", async () => {
    const ids = await seedEvents(t.pool, 2_500, { type: "supplier.connected" });
    await poisonAt(ids, "2026-12-05 17:00:00+00");
    const upTo = "2026-12-05 18:00:00+00";
    // One operator's batch is held open; the other, on its own connection, neither
    // waits for those rows nor takes them.
    const first = await t.pool.connect();
    try {
      await first.query("BEGIN");
      expect(await requeuePoisoned(first, { upTo, limit: 100 })).toEqual({ requeued: 100, more: true });
      expect(await requeuePoisoned(t.pool, { upTo, limit: 100 })).toEqual({ requeued: 100, more: true });
      await first.query("COMMIT");
    } finally {
      first.release();
    }
    // Then both run to the end at once.
    const operator = async () => {
      const client = await t.pool.connect();
      try {
        return (await requeuePoisonedInRounds(client, { upTo })).requeued;
      } finally {
        client.release();
      }
    };
    const [a, b] = await Promise.all([operator(), operator()]);
    expect(200 + a + b).toBe(2_500);
    const { rows } = await t.pool.query(
      `SELECT count(*) FILTER (WHERE poisoned_at IS NULL AND attempts = 0)::int AS back,
              (SELECT count(*) FROM outbox_alerts WHERE resolved_at IS NULL)::int AS open_alerts
         FROM events`,
    );
    expect(rows[0]).toEqual({ back: 2_500, open_alerts: 0 });
  });
});

describe("alert evaluation", () => {
  it("raises one alert per firing condition and resolves it when the condition clears", async () => {
    await seedEvents(t.pool, 1);
    await t.pool.query(`UPDATE events SET created_at = now() - interval '1 hour'`);
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 6, last_error = 'QStash 503'`);
    expect((await evaluateAlerts(t.pool)).sort()).toEqual(["relay.failing", "relay.lagging"]);
    expect(await evaluateAlerts(t.pool)).toEqual([]);
    expect(await listAlerts(t.pool, { open: true })).toHaveLength(2);
    // An open alert follows the condition: it read "6 … failed" while the count grew.
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 10, last_error = 'QStash 504'`);
    expect(await evaluateAlerts(t.pool)).toEqual([]);
    const failing = async () => (await listAlerts(t.pool)).find((a) => a.kind === "relay.failing")!;
    expect((await failing()).message).toBe(
      "10 relay passes failed in a row; last error: QStash 504. It tries again as its backoff ends; " +
        "once the cause is fixed, `relay drain --now` (the operator CLI) ends the backoff and sends what waits",
    );

    await runPass({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      now: new Date(Date.now() + 3600_000),
    });
    await evaluateAlerts(t.pool);
    expect(await listAlerts(t.pool, { open: true })).toEqual([]);
    // Resolved saying so, with its last words kept.
    expect((await failing()).message).toBe(
      "recovered: a relay pass succeeded (it said: 10 relay passes failed in a row; last error: QStash 504. " +
        "It tries again as its backoff ends; once the cause is fixed, `relay drain --now` (the operator CLI) " +
        "ends the backoff and sends what waits)",
    );
    const lagging = (await listAlerts(t.pool)).find((a) => a.kind === "relay.lagging")!;
    expect(lagging.message).toMatch(
      new RegExp(
        "^caught up: no due event has waited over 300 s \\(it said: oldest due event has waited \\d+ s \\(threshold 300 s\\)" +
          "\\. `stats` \\(the operator CLI\\) says whether the relay is backed off and when the sweep last ran; " +
          "`relay drain` sends what waits now\\)$",
      ),
    );
  });

  it("two overlapping sweeps that both see no open alert still open only one", async () => {
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 6, last_error = 'QStash 503'`);
    const [a, b] = [await t.pool.connect(), await t.pool.connect()];
    try {
      // Both transactions evaluate before either commits, so each one's NOT EXISTS
      // sees no open alert: only the unique partial index can decide.
      await a.query("BEGIN");
      await b.query("BEGIN");
      expect(await evaluateAlerts(a)).toEqual(["relay.failing"]);
      const second = evaluateAlerts(b);
      await waitFor(async () => {
        const { rows } = await t.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        return rows[0].n > 0;
      });
      await a.query("COMMIT");
      expect(await second).toEqual([]);
      await b.query("COMMIT");
    } finally {
      // Destroyed, not pooled: a failed run leaves them mid-transaction.
      a.release(true);
      b.release(true);
    }
    const open = await listAlerts(t.pool, { open: true });
    expect(open.map((x) => x.kind)).toEqual(["relay.failing"]);
  });
});

describe("answering QStash", () => {
  const body = {
    subscription: "s",
    event: {
      id: "00000000-0000-4000-8000-000000000001",
      seq: 1,
      type: "a.b",
      subject: "x",
      scope: null,
      payload: {},
      createdAt: "2026-01-01T00:00:00Z",
    },
    coalesced: [],
  };
  const ctx = { messageId: "msg_1", retried: 0 };

  it("acknowledges success, asks for a retry on error, and stops retries for a non-retryable error", async () => {
    expect(await runJob(async () => undefined, body, ctx)).toEqual({ done: true });
    expect(await runJob(async () => Promise.reject(new Error("db down")), body, ctx)).toEqual({
      done: false,
      retry: true,
      message: "db down",
    });
    expect(await runJob(async () => Promise.reject(new NonRetryableError("gone")), body, ctx)).toEqual({
      done: false,
      retry: false,
      message: "gone",
    });
  });

  it("says a failed query by its reason and statement, never its parameters (a note's text)", async () => {
    const secret = "the note's private text";
    const failing = async () => {
      await t.db.execute(sql`INSERT INTO no_such_table (body) VALUES (${secret})`);
    };
    const outcome = await runJob(failing, body, ctx);
    expect(outcome).toEqual({
      done: false,
      retry: true,
      message: expect.stringMatching(
        /^query failed: relation "no_such_table" does not exist \(42P01\); the statement, its parameters withheld: insert into no_such_table/i,
      ),
    });
    expect(JSON.stringify(outcome)).not.toContain(secret);
  });

  it("refuses a body that is not a job, without retries", () => {
    expect(parseJobBody(JSON.stringify(body))).toEqual(body);
    expect(() => parseJobBody("{")).toThrow(NonRetryableError);
    expect(() => parseJobBody(JSON.stringify({ ...body, event: { ...body.event, id: "x" } }))).toThrow(
      /bad: event.id/,
    );
  });
});
