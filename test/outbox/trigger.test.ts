import pg from "pg";
import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import { beforeEach, describe, expect, it } from "vitest";
import { InvalidEventError, recordEvent } from "../../src/outbox/index.ts";
import { MAX_EVENT_BYTES } from "../../src/outbox/record.ts";
import { claim, EVENT_JSON_SQL } from "../../src/outbox/relay/claim.ts";
import { planBatch } from "../../src/outbox/relay/plan.ts";
import { RELAY_POLICY } from "../../src/outbox/relay/policy.ts";
import { subscriptions } from "../../src/domain/subscriptions.ts";
import { corpusNotes, suppliers } from "../../src/domain/schema.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

const types = async () => (await eventStates(t.pool)).map((e) => e.type);

describe("the corpus_notes trigger", () => {
  it("records created, changed (watched columns only) and deleted", async () => {
    const db = drizzle(t.pool);
    const [note] = await db.insert(corpusNotes).values({ title: "first", scope: "acme" }).returning();
    await db.update(corpusNotes).set({ updatedAt: new Date() }).where(eq(corpusNotes.id, note!.id));
    await db.update(corpusNotes).set({ title: "first" }).where(eq(corpusNotes.id, note!.id));
    expect(await types()).toEqual(["corpus.note.created"]);

    await db
      .update(corpusNotes)
      .set({ title: "renamed", tags: ["a"] })
      .where(eq(corpusNotes.id, note!.id));
    await db.update(corpusNotes).set({ body: "text" }).where(eq(corpusNotes.id, note!.id));
    await db.delete(corpusNotes).where(eq(corpusNotes.id, note!.id));

    const rows = await eventStates(t.pool);
    expect(rows.map((e) => e.type)).toEqual([
      "corpus.note.created",
      "corpus.note.changed",
      "corpus.note.changed",
      "corpus.note.deleted",
    ]);
    const { rows: full } = await t.pool.query(`SELECT subject, scope, payload FROM events ORDER BY seq`);
    expect(full[1]).toEqual({
      subject: note!.id,
      scope: "acme",
      payload: { noteId: note!.id, changed: ["title", "tags"] },
    });
    expect(full[2].payload.changed).toEqual(["body"]);
  });

  it("leaves no event behind a rolled-back write", async () => {
    const db = drizzle(t.pool);
    await expect(
      db.transaction(async (tx) => {
        await tx.insert(corpusNotes).values({ title: "doomed" });
        throw new Error("use case failed after the write");
      }),
    ).rejects.toThrow("use case failed");
    expect(await types()).toEqual([]);
    expect((await t.pool.query(`SELECT count(*)::int AS n FROM corpus_notes`)).rows[0].n).toBe(0);
  });

  it("wakes listeners with pg_notify when the write commits", async () => {
    const listener = new pg.Client({ connectionString: t.url });
    await listener.connect();
    try {
      await listener.query("LISTEN outbox_events");
      const notified = new Promise<string>((resolve) =>
        listener.once("notification", (n) => resolve(n.channel)),
      );
      await drizzle(t.pool).insert(corpusNotes).values({ title: "hello" });
      expect(await notified).toBe("outbox_events");
    } finally {
      await listener.end();
    }
  });
});

describe("recordEvent", () => {
  it("commits the event with the change, or neither", async () => {
    const db = drizzle(t.pool);
    await db.transaction(async (tx) => {
      const [s] = await tx.insert(suppliers).values({ name: "kept" }).returning();
      await recordEvent(tx, { type: "supplier.connected", subject: s!.id, payload: { name: "kept" } });
    });
    await expect(
      db.transaction(async (tx) => {
        const [s] = await tx.insert(suppliers).values({ name: "lost" }).returning();
        await recordEvent(tx, { type: "supplier.connected", subject: s!.id });
        throw new Error("activation failed");
      }),
    ).rejects.toThrow("activation failed");
    const { rows } = await t.pool.query(
      `SELECT e.payload FROM events e JOIN suppliers s ON s.id::text = e.subject`,
    );
    expect(rows).toEqual([{ payload: { name: "kept" } }]);
    expect(await types()).toEqual(["supplier.connected"]);
  });

  it("rejects a malformed event before writing anything", async () => {
    const db = drizzle(t.pool);
    await expect(recordEvent(db, { type: "Supplier Connected", subject: "x" })).rejects.toThrow(
      InvalidEventError,
    );
    await expect(recordEvent(db, { type: "supplier.connected", subject: "" })).rejects.toThrow(/subject/);
    expect(await types()).toEqual([]);
  });

  it("refuses an event its jobs could not carry, measured as the relay sends it, and leaves no row", async () => {
    const db = drizzle(t.pool);
    const subject = "sup_1";
    // What the event adds around a string payload, as the relay's jobs carry it.
    const small = await recordEvent(db, { type: "supplier.connected", subject, payload: "x" });
    const { rows } = await t.pool.query<{ bytes: number }>(
      `SELECT octet_length(${EVENT_JSON_SQL})::int AS bytes FROM events WHERE seq = $1`,
      [small.seq],
    );
    const around = rows[0]!.bytes - 1;
    await t.pool.query("DELETE FROM events");

    // The last byte that fits is taken, and the relay's plan sends its job.
    const fits = await recordEvent(db, {
      type: "supplier.connected",
      subject,
      payload: "x".repeat(MAX_EVENT_BYTES - around),
    });
    const client = await t.pool.connect();
    try {
      const { events: claimed } = await claim(client, 10, undefined);
      expect(claimed.map((e) => Buffer.byteLength(e.eventJson!))).toEqual([MAX_EVENT_BYTES]);
      // Every subscription it matches gets its job, none over QStash's limit.
      const [plan] = planBatch(claimed, subscriptions, {
        coalesce: true,
        maxJobBytes: RELAY_POLICY.maxJobBytes,
      });
      expect(plan!.error).toBeUndefined();
      expect(plan!.jobs.length).toBeGreaterThan(0);
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
    await t.pool.query("DELETE FROM events WHERE seq = $1", [fits.seq]);

    // One more is refused, saying what to do, inside the caller's transaction.
    await expect(
      db.transaction(async (tx) => {
        await tx.insert(suppliers).values({ name: "big" });
        await recordEvent(tx, {
          type: "supplier.connected",
          subject,
          payload: "x".repeat(MAX_EVENT_BYTES - around + 1),
        });
      }),
    ).rejects.toThrow(
      new InvalidEventError(
        `event supplier.connected for "sup_1" is ${MAX_EVENT_BYTES + 1} bytes as its jobs carry it, over the ${MAX_EVENT_BYTES} that fit in a QStash message: put ids and a few fields in the payload, and let subscribers read the rest`,
      ),
    );
    expect(await t.pool.query("SELECT count(*)::int AS n FROM suppliers WHERE name = 'big'")).toMatchObject({
      rows: [{ n: 0 }],
    });
    // Smaller as JSON than the limit, larger as jsonb prints it ("0, 0, …"): refused too,
    // and taken out even where the caller catches the error and commits.
    const zeros = new Array<number>(350_000).fill(0);
    expect(JSON.stringify(zeros).length).toBeLessThan(MAX_EVENT_BYTES);
    await db.transaction(async (tx) => {
      await expect(recordEvent(tx, { type: "supplier.connected", subject, payload: zeros })).rejects.toThrow(
        InvalidEventError,
      );
    });
    expect(await types()).toEqual([]);
  });
});
