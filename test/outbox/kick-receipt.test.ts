import { beforeEach, describe, expect, it } from "vitest";
import {
  awaitFanout,
  defineSubscriptions,
  inJsonbOrder,
  readReceipt,
  receiptFromKick,
  runPass,
  type Queryable,
} from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { resetOutbox } from "../support/relay.ts";

// A write's kick answers its receipt from what its own pass marked, instead of
// reading the rows back: the answer must be the one the read gives, to the byte.
const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

// Declared in an order jsonb does not keep (it puts shorter keys first), and one
// coalescing subscription, so receipts carry both kinds of fan-out entry.
const subscriptions = defineSubscriptions([
  { name: "webhook.fanout-long-name", types: ["*"] },
  { name: "ix", types: ["*"], coalesce: true },
]);

/** A Queryable that counts the statements sent through it. */
function counting(): Queryable & { queries: number } {
  const db = {
    queries: 0,
    query: (text: string, values?: unknown[]) => {
      db.queries++;
      return t.pool.query(text, values);
    },
  };
  return db as Queryable & { queries: number };
}

const json = (value: unknown) => JSON.stringify(value);

describe("a receipt from the kick's own pass", () => {
  it("is the receipt a read of the rows gives, byte for byte: time, fan-out and its key order", async () => {
    // Three events of one subject: the coalescing subscription folds the first two into the last.
    const ids = await seedEvents(t.pool, 3, { subject: () => "one-note" });
    const pass = await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
    expect(pass.fanned).toBe(3);
    // As the pass built them, the last event's keys are in publish order; read back, in jsonb's.
    expect(Object.keys(pass.fannedEvents[2]!.fanout)).toEqual(["webhook.fanout-long-name", "ix"]);

    const fromKick = receiptFromKick(ids, pass.fannedEvents);
    const read = await readReceipt(t.pool, ids);
    expect(read.complete).toBe(true);
    expect(read.events[0]!.fanout).toEqual({
      ix: { coalescedInto: ids[2] },
      "webhook.fanout-long-name": expect.anything(),
    });
    expect(json(fromKick)).toBe(json(read));
  });

  it("is the same after a failed pass, when the next pass retries rows one by one", async () => {
    const ids = await seedEvents(t.pool, 2);
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 1`);
    const pass = await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
    expect(pass.mode).toBe("rows");
    expect(json(receiptFromKick(ids, pass.fannedEvents))).toBe(json(await readReceipt(t.pool, ids)));
  });

  it("answers the wait without reading the rows", async () => {
    const ids = await seedEvents(t.pool, 2);
    const db = counting();
    const kicked = runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions }).then((p) =>
      receiptFromKick(ids, p.fannedEvents),
    );
    const receipt = await awaitFanout(db, ids, { deadline: Date.now() + 5_000, kicked });
    expect(db.queries).toBe(0);
    expect(json(receipt)).toBe(json(await readReceipt(t.pool, ids)));
  });

  it("leaves the answer to the rows when a concurrent pass holds one of the events", async () => {
    const ids = await seedEvents(t.pool, 2);
    // Another pass's transaction has the second event locked: this kick's claim skips it.
    const other = await t.pool.connect();
    try {
      await other.query("BEGIN");
      await other.query("SELECT 1 FROM events WHERE id = $1 FOR UPDATE", [ids[1]]);
      const pass = await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
      expect(pass.fannedEvents.map((e) => e.id)).toEqual([ids[0]]);
      expect(receiptFromKick(ids, pass.fannedEvents)).toBeUndefined();

      const db = counting();
      const waiting = awaitFanout(db, ids, {
        deadline: Date.now() + 5_000,
        pollMs: 20,
        kicked: Promise.resolve(receiptFromKick(ids, pass.fannedEvents)),
      });
      // The other pass lets go, and a later pass fans the event out: the poll sees it.
      await other.query("ROLLBACK");
      await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
      const receipt = await waiting;
      expect(receipt.complete).toBe(true);
      expect(db.queries).toBeGreaterThan(0);
      expect(json(receipt)).toBe(json(await readReceipt(t.pool, ids)));
    } finally {
      await other.query("ROLLBACK").catch(() => undefined);
      other.release();
    }
  });

  it("is not taken for events it does not cover", async () => {
    const [mine, theirs] = await seedEvents(t.pool, 2);
    const pass = await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
    const theirReceipt = receiptFromKick([theirs!], pass.fannedEvents);
    expect(theirReceipt?.complete).toBe(true);
    // A kick's receipt of other events is never the answer: the rows are read.
    const db = counting();
    const receipt = await awaitFanout(db, [mine!], {
      deadline: Date.now() + 5_000,
      kicked: Promise.resolve(theirReceipt),
    });
    expect(db.queries).toBe(1);
    expect(receipt.events.map((e) => e.id)).toEqual([mine]);
    // Nor is one for a write that recorded no event, or when an id is missing from the pass.
    expect(receiptFromKick([], pass.fannedEvents)).toBeUndefined();
    expect(
      receiptFromKick([mine!, "00000000-0000-4000-8000-000000000000"], pass.fannedEvents),
    ).toBeUndefined();
  });
});

describe("inJsonbOrder", () => {
  it("orders keys, at every depth, as Postgres stores a jsonb object", async () => {
    const value = {
      zz: 1,
      é: { b: [{ yy: 1, x: 2 }], a: null },
      z: "z",
      ab: { "ü-long": true, c: false },
      aa: [3, { "2": 2, "10": 10 }],
    };
    const { rows } = await t.pool.query<{ text: string }>("SELECT $1::jsonb::text AS text", [json(value)]);
    // Postgres prints jsonb with ", " and ": "; the key order is what is compared.
    expect(json(inJsonbOrder(value))).toBe(json(JSON.parse(rows[0]!.text)));
    expect(json(inJsonbOrder(value))).not.toBe(json(value));
  });
});
