import pg from "pg";
import { beforeEach, describe, expect, it } from "vitest";
import { drizzle } from "drizzle-orm/node-postgres";
import { defineSubscriptions, drain, recordEvent, runPass } from "../../src/outbox/index.ts";
import { corpusNotes } from "../../src/domain/schema.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("claim", () => {
  it("claims only unfanned, unpoisoned, due rows, in seq order", async () => {
    const [a, b, c, fanned, poisoned, later, d] = await seedEvents(t.pool, 7);
    await t.pool.query(`UPDATE events SET fanned_out_at = now(), fanout = '{}' WHERE id = $1`, [fanned]);
    await t.pool.query(`UPDATE events SET poisoned_at = now(), attempts = 5 WHERE id = $1`, [poisoned]);
    await t.pool.query(
      `UPDATE events SET next_attempt_at = now() + interval '1 hour', attempts = 1 WHERE id = $1`,
      [later],
    );
    const publisher = new RecordingPublisher();

    const pass = await runPass({ pool: t.pool, publisher, subscriptions: everything });

    expect(pass).toMatchObject({ mode: "batch", claimed: 4, fanned: 4, jobs: 4 });
    expect(publisher.eventIds("all")).toEqual([a, b, c, d]);

    // Once its time has come, the delayed row is claimed too; the poisoned one never.
    const inTwoHours = new Date(Date.now() + 2 * 3600_000);
    const next = await runPass({ pool: t.pool, publisher, subscriptions: everything, now: inTwoHours });
    expect(next.claimed).toBe(1);
    expect(publisher.eventIds("all")).toEqual([a, b, c, d, later]);
    const states = await eventStates(t.pool);
    expect(states.find((s) => s.id === poisoned)?.fanned_out_at).toBeNull();
  });

  it("records which job each subscription got, and fans out events no one subscribes to", async () => {
    const subscriptions = defineSubscriptions([
      { name: "notes", types: ["corpus.note.*"] },
      { name: "everything", types: ["*"], retries: 7 },
    ]);
    const [note] = await seedEvents(t.pool, 1, { type: "corpus.note.created" });
    const [other] = await seedEvents(t.pool, 1, { type: "nobody.cares" });
    const publisher = new RecordingPublisher();
    await runPass({ pool: t.pool, publisher, subscriptions: subscriptions.slice(0, 1) });

    const states = await eventStates(t.pool);
    const noteRow = states.find((s) => s.id === note)!;
    expect(noteRow.fanned_out_at).not.toBeNull();
    expect(noteRow.fanout).toEqual({ notes: { messageId: "msg_1" } });
    expect(states.find((s) => s.id === other)).toMatchObject({ fanout: {} });
    expect(publisher.accepted[0]).toMatchObject({
      subscription: "notes",
      deduplicationId: `${note}:notes`,
      body: { subscription: "notes", event: { id: note, type: "corpus.note.created" }, coalesced: [] },
    });

    await seedEvents(t.pool, 1, { type: "corpus.note.changed" });
    await runPass({ pool: t.pool, publisher, subscriptions });
    expect(publisher.accepted.slice(1).map((j) => [j.subscription, j.retries])).toEqual([
      ["notes", undefined],
      ["everything", 7],
    ]);
  });
});

describe("no committed event is ever skipped", () => {
  it("fans out both events when a lower seq commits after a pass already fanned a higher one", async () => {
    const a = new pg.Client({ connectionString: t.url });
    const b = new pg.Client({ connectionString: t.url });
    await a.connect();
    await b.connect();
    try {
      await a.query("BEGIN");
      const { rows: ra } = await a.query(
        `INSERT INTO events (type, subject) VALUES ('t.a', 'a') RETURNING seq, id`,
      );
      await b.query("BEGIN");
      const { rows: rb } = await b.query(
        `INSERT INTO events (type, subject) VALUES ('t.b', 'b') RETURNING seq, id`,
      );
      expect(Number(ra[0].seq)).toBeLessThan(Number(rb[0].seq));
      await b.query("COMMIT");

      const publisher = new RecordingPublisher();
      const first = await runPass({ pool: t.pool, publisher, subscriptions: everything });
      expect(first.claimed).toBe(1);
      expect(publisher.eventIds("all")).toEqual([rb[0].id]);

      await a.query("COMMIT");
      const second = await runPass({ pool: t.pool, publisher, subscriptions: everything });
      expect(second.claimed).toBe(1);
      expect(publisher.eventIds("all")).toEqual([rb[0].id, ra[0].id]);
      expect(await unfannedCount(t.pool)).toBe(0);
    } finally {
      await a.end();
      await b.end();
    }
  });
});

describe("batch size", () => {
  it("fans a 2,000-note import out in passes of at most 200 rows", async () => {
    const db = drizzle(t.pool);
    await db.insert(corpusNotes).values(Array.from({ length: 2000 }, (_, i) => ({ title: `note ${i}` })));
    expect(await unfannedCount(t.pool)).toBe(2000);
    const publisher = new RecordingPublisher();
    const claims: number[] = [];

    const result = await drain({
      pool: t.pool,
      publisher,
      subscriptions: defineSubscriptions([{ name: "index", types: ["corpus.note.*"] }]),
      budgetMs: 60_000,
      onPass: (pass) => claims.push(pass.claimed),
    });

    expect(claims).toEqual([...Array(10).fill(200), 0]);
    expect(publisher.calls.every((n) => n <= 200)).toBe(true);
    expect(result).toMatchObject({ fanned: 2000, stoppedBecause: "drained" });
    expect(await unfannedCount(t.pool)).toBe(0);
  });

  it("a kick stops after the first pass that is not full", async () => {
    await seedEvents(t.pool, 450);
    const claims: number[] = [];
    await drain({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      budgetMs: 60_000,
      until: "not-full",
      onPass: (pass) => claims.push(pass.claimed),
    });
    expect(claims).toEqual([200, 200, 50]);
  });
});

describe("coalescing is opt-in per subscription", () => {
  const subscriptions = defineSubscriptions([
    { name: "notify.mail", types: ["supplier.*"] },
    { name: "supplier.index", types: ["supplier.*"], coalesce: true },
  ]);

  it("every event of a subject reaches a non-coalescing subscriber; a coalescing one gets the latest", async () => {
    const db = drizzle(t.pool);
    const recorded = await db.transaction(async (tx) => [
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-1" }),
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-2" }),
      await recordEvent(tx, { type: "supplier.activated", subject: "sup-1" }),
    ]);
    const [connected1, connected2, activated1] = recorded.map((r) => r.id) as [string, string, string];
    const publisher = new RecordingPublisher();

    await runPass({ pool: t.pool, publisher, subscriptions });

    expect(publisher.eventIds("notify.mail")).toEqual([connected1, connected2, activated1]);
    const indexJobs = publisher.accepted.filter((j) => j.subscription === "supplier.index");
    expect(indexJobs.map((j) => [j.body.event.id, j.body.coalesced])).toEqual([
      [connected2, []],
      [activated1, [connected1]],
    ]);
    const states = await eventStates(t.pool);
    const fanout = (id: string) => states.find((s) => s.id === id)!.fanout!;
    expect(fanout(connected1)["supplier.index"]).toEqual({ coalescedInto: activated1 });
    expect(fanout(connected1)["notify.mail"]).toHaveProperty("messageId");
    expect(fanout(activated1)["supplier.index"]).toHaveProperty("messageId");
  });

  it("never coalesces across batches", async () => {
    const db = drizzle(t.pool);
    await db.transaction(async (tx) => {
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-1" });
      await recordEvent(tx, { type: "supplier.activated", subject: "sup-1" });
    });
    const publisher = new RecordingPublisher();
    await drain({ pool: t.pool, publisher, subscriptions, batchSize: 1, budgetMs: 10_000 });
    expect(publisher.accepted.filter((j) => j.subscription === "supplier.index")).toHaveLength(2);
  });

  it("keeps subjects of different scopes apart", async () => {
    const db = drizzle(t.pool);
    await db.transaction(async (tx) => {
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-1", scope: "tenant-a" });
      await recordEvent(tx, { type: "supplier.connected", subject: "sup-1", scope: "tenant-b" });
    });
    const publisher = new RecordingPublisher();
    await runPass({ pool: t.pool, publisher, subscriptions });
    expect(publisher.accepted.filter((j) => j.subscription === "supplier.index")).toHaveLength(2);
  });
});

describe("payloads travel as the text Postgres sent", () => {
  it("filters read the parsed payload, and each job's bytes carry it unchanged, unicode and escapes included", async () => {
    const payloads = [
      { keep: true, text: 'quote " backslash \\ newline \n emoji 🎉 é' },
      { keep: false, text: "dropped" },
    ];
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO events (type, subject, payload)
       SELECT 'test.happened', 's-' || ord, p FROM unnest($1::jsonb[]) WITH ORDINALITY AS x(p, ord) ORDER BY ord
       RETURNING id`,
      [payloads.map((p) => JSON.stringify(p))],
    );
    const subscriptions = defineSubscriptions([
      { name: "kept", types: ["*"], filter: (e) => (e.payload as { keep: boolean }).keep },
    ]);
    const publisher = new RecordingPublisher();

    const pass = await runPass({ pool: t.pool, publisher, subscriptions });

    expect(pass).toMatchObject({ fanned: 2, jobs: 1 });
    const [job] = publisher.accepted;
    expect(job!.body.event).toMatchObject({ id: rows[0]!.id, payload: payloads[0] });
    // The bytes a publisher sends are the body it is handed, parsed back equal.
    expect(JSON.parse(job!.json!)).toEqual(job!.body);
  });

  it("each job's event is the row as JobBody describes it, createdAt as toISOString writes the stored time", async () => {
    const [id] = await seedEvents(t.pool, 1, { scope: "tenant-1" });
    // Microseconds past .678: JavaScript dates keep milliseconds, truncated.
    await t.pool.query(`UPDATE events SET created_at = '2026-01-02 03:04:05.678999+01' WHERE id = $1`, [id]);
    const seen: Date[] = [];
    const subscriptions = defineSubscriptions([
      { name: "all", types: ["*"], filter: (e) => seen.push(e.createdAt) > 0 },
    ]);
    const publisher = new RecordingPublisher();
    await runPass({ pool: t.pool, publisher, subscriptions });
    const [state] = await eventStates(t.pool);
    const [job] = publisher.accepted;
    // Postgres's JSON text (spaces around separators), parsed back to the body.
    expect(JSON.parse(job!.json!)).toEqual(job!.body);
    expect(job!.body.event).toEqual({
      id,
      seq: Number(state!.seq),
      type: "test.happened",
      subject: "subject-1",
      scope: "tenant-1",
      payload: { n: 1, pad: "" },
      createdAt: "2026-01-02T02:04:05.678Z",
    });
    expect(seen.map((d) => d.toISOString())).toEqual(["2026-01-02T02:04:05.678Z"]);
  });
});
