import { beforeEach, describe, expect, it } from "vitest";
import {
  NonRetryableError,
  awaitFanout,
  deleteOldFannedEvents,
  evaluateAlerts,
  listAlerts,
  parseJobBody,
  readReceipt,
  runJob,
  runPass,
} from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents } from "../support/events.ts";
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

describe("alert evaluation", () => {
  it("raises one alert per firing condition and resolves it when the condition clears", async () => {
    await seedEvents(t.pool, 1);
    await t.pool.query(`UPDATE events SET created_at = now() - interval '1 hour'`);
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 6, last_error = 'QStash 503'`);
    expect((await evaluateAlerts(t.pool)).sort()).toEqual(["relay.failing", "relay.lagging"]);
    expect(await evaluateAlerts(t.pool)).toEqual([]);
    expect(await listAlerts(t.pool, { open: true })).toHaveLength(2);

    await runPass({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      now: new Date(Date.now() + 3600_000),
    });
    await evaluateAlerts(t.pool);
    expect(await listAlerts(t.pool, { open: true })).toEqual([]);
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

  it("refuses a body that is not a job, without retries", () => {
    expect(parseJobBody(JSON.stringify(body))).toEqual(body);
    expect(() => parseJobBody("{")).toThrow(NonRetryableError);
    expect(() => parseJobBody(JSON.stringify({ ...body, event: { ...body.event, id: "x" } }))).toThrow(
      /bad: event.id/,
    );
  });
});
