import { describe, expect, it } from "vitest";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";
import { createNote } from "../../src/domain/notes/create.ts";
import { getNote } from "../../src/domain/notes/get.ts";
import { inOneTrip, inTwoTrips, literal, oneTripPool } from "../../src/domain/one-trip.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";

const t = useTestDatabase();

/** A pool whose connections count the queries they send: one query is one round trip. */
function countingPool(max = 1): { pool: pg.Pool; sent: () => number } {
  const pool = t.newPool(max);
  let sent = 0;
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      sent++;
      return query(...args);
    };
  });
  return { pool, sent: () => sent };
}

describe("a note created in one round trip", () => {
  it("sends BEGIN, the high-water mark, the INSERT, the events read and COMMIT as one query", async () => {
    const { pool, sent } = countingPool();
    const db = drizzle(pool);
    await pool.query("SELECT 1"); // the connection is made (and counted) before the write
    const before = sent();
    const { note, eventIds } = await createNote(db, { title: "One trip", body: "b", tags: ["x", "y"] });
    expect(sent() - before).toBe(1);
    const recorded = await eventsAbout(t.pool, note.id);
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created"]);
    expect(eventIds).toEqual([recorded[0]!.id]);
  });

  it("returns the note as drizzle's path (inside a transaction) returns it", async () => {
    const input = { title: "Same shape", body: "body", tags: ["a"], scope: "tenant-1" };
    const oneTrip = await createNote(t.db, input);
    const viaDrizzle = await t.db.transaction((tx) => createNote(tx, input));
    const strip = (n: typeof oneTrip.note) => ({ ...n, id: "", createdAt: 0, updatedAt: 0 });
    expect(strip(oneTrip.note)).toEqual(strip(viaDrizzle.note));
    expect(oneTrip.note.createdAt).toBeInstanceOf(Date);
    expect(oneTrip.note.updatedAt).toBeInstanceOf(Date);
    // What the row holds, read back the ordinary way.
    expect(await getNote(t.db, oneTrip.note.id)).toEqual(oneTrip.note);
  });

  it("stores text that looks like SQL, quotes and escapes exactly as given", async () => {
    const nasty = [
      "it's",
      "''; DROP TABLE corpus_notes; --",
      "back\\slash \\' and \\\\",
      "E'\\x41' $1 $$ $tag$",
      "line\nbreak\ttab",
      "ünïcödé ✓ 𝄞",
      '"double" {braces,} [x]',
    ];
    const singleLine = nasty.filter((s) => !/[\n\t]/.test(s));
    const { note } = await createNote(t.db, {
      title: nasty[1]!,
      body: nasty.join(" | "),
      tags: singleLine,
      scope: nasty[2]!,
    });
    const stored = await getNote(t.db, note.id);
    expect(stored).toMatchObject({
      title: nasty[1],
      body: nasty.join(" | "),
      tags: singleLine,
      scope: nasty[2],
    });
    expect(note).toEqual(stored);
  });

  it("stores no tags and a null scope as the column defaults would", async () => {
    const { note } = await createNote(t.db, { title: "Bare" });
    expect(note).toMatchObject({ tags: [], scope: null, body: "" });
  });

  it("refuses NUL instead of sending text Postgres would cut", () => {
    expect(() => literal("a\0b")).toThrow(RangeError);
    expect(literal(null)).toBe("NULL");
  });

  it("a database gives its pool; a transaction none, so a use case makes a savepoint instead", async () => {
    expect(oneTripPool(t.db)).toBe(t.pool);
    await t.db.transaction(async (tx) => {
      expect(oneTripPool(tx)).toBeUndefined();
    });
  });

  it("over a single connection (no pool to take one from), a create still works, through drizzle's transaction", async () => {
    const client = new pg.Client({ connectionString: t.url });
    await client.connect();
    try {
      const db = drizzle(client);
      expect(oneTripPool(db)).toBeUndefined();
      const { note, eventIds } = await createNote(db, { title: "On a client" });
      const recorded = await eventsAbout(t.pool, note.id);
      expect(eventIds).toEqual(recorded.map((e) => e.id));
    } finally {
      await client.end();
    }
  });
});

describe("inOneTrip", () => {
  it("is atomic: a failing statement rolls back the ones before it, and the connection is clean after", async () => {
    const { pool } = countingPool(1);
    const title = `rolled back ${Date.now()}`;
    await expect(
      inOneTrip(pool, [`INSERT INTO corpus_notes (title) VALUES (${literal(title)})`, "SELECT 1 / 0"]),
    ).rejects.toThrow(/division by zero/);
    const { rows } = await t.pool.query("SELECT id FROM corpus_notes WHERE title = $1", [title]);
    expect(rows).toEqual([]);
    // The pool's only connection was handed back rolled back, not in an aborted transaction.
    const again = await pool.query("SELECT 1 AS one");
    expect(again.rows).toEqual([{ one: 1 }]);
    await expect(pool.query("SELECT 1")).resolves.toBeDefined();
  });

  it("answers each statement's own result, without BEGIN's and COMMIT's", async () => {
    const results = await inOneTrip(t.pool, ["SELECT 1 AS a", "SELECT 2 AS b, 3 AS c"]);
    expect(results.map((r) => r.rows)).toEqual([[{ a: 1 }], [{ b: 2, c: 3 }]]);
  });
});

describe("inTwoTrips", () => {
  it("sends BEGIN and the first statements, then what they made and COMMIT: two queries, one transaction", async () => {
    const { pool, sent } = countingPool(1);
    await pool.query("SELECT 1");
    const before = sent();
    const title = `two trips ${Date.now()}`;
    const results = await inTwoTrips(pool, [`SELECT ${literal(title)} AS title`], ([first]) => [
      `INSERT INTO corpus_notes (title) VALUES (${literal(`${first!.rows[0]!.title as string} kept`)})`,
    ]);
    expect(sent() - before).toBe(2);
    expect(results.map((r) => r.rows)).toEqual([[{ title }]]);
    const { rows } = await t.pool.query("SELECT 1 FROM corpus_notes WHERE title = $1", [`${title} kept`]);
    expect(rows).toHaveLength(1);
  });

  it("is atomic: a failure in either trip, or in what makes the second, rolls back the first's writes", async () => {
    const { pool } = countingPool(1);
    const insert = (title: string) => `INSERT INTO corpus_notes (title) VALUES (${literal(title)})`;
    const stamp = Date.now();
    await expect(inTwoTrips(pool, [insert(`a ${stamp}`), "SELECT 1 / 0"], () => [])).rejects.toThrow(
      /division by zero/,
    );
    await expect(inTwoTrips(pool, [insert(`b ${stamp}`)], () => ["SELECT 1 / 0"])).rejects.toThrow(
      /division by zero/,
    );
    await expect(
      inTwoTrips(pool, [insert(`c ${stamp}`)], () => {
        throw new Error("made nothing");
      }),
    ).rejects.toThrow("made nothing");
    const { rows } = await t.pool.query("SELECT title FROM corpus_notes WHERE title LIKE $1", [`% ${stamp}`]);
    expect(rows).toEqual([]);
    // The pool's only connection was handed back clean.
    expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
  });
});
