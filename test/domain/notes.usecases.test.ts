import { sql } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { createNote } from "../../src/domain/notes/create.ts";
import { getNote } from "../../src/domain/notes/get.ts";
import { importNotes } from "../../src/domain/notes/import.ts";
import { deleteNote } from "../../src/domain/notes/remove.ts";
import { updateNote } from "../../src/domain/notes/update.ts";
import type { DomainError } from "../../src/domain/errors.ts";
import { NotFoundError } from "../../src/domain/errors.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout, waitFor } from "../support/helpers.ts";

const t = useTestDatabase();
const missing = "00000000-0000-4000-8000-000000000000";

describe("notes use cases", () => {
  it("create commits the note and returns the id of the event the trigger recorded", async () => {
    const { note, eventIds } = await createNote(t.db, { title: "Hello", body: "first", tags: ["a"] });
    expect(note).toMatchObject({ title: "Hello", body: "first", tags: ["a"], scope: null });
    const recorded = await eventsAbout(t.pool, note.id);
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created"]);
    expect(eventIds).toEqual([recorded[0]!.id]);
  });

  it("concurrent creates and imports each return exactly the events their own notes recorded", async () => {
    // Real concurrency: the high-water mark each INSERT reads must leave out the
    // others' events and keep its own, whichever commits first.
    const writes = await Promise.all([
      ...Array.from({ length: 12 }, (_, i) =>
        createNote(t.db, { title: `concurrent ${i}` }).then((r) => ({
          ids: [r.note.id],
          eventIds: r.eventIds,
        })),
      ),
      ...Array.from({ length: 3 }, (_, i) =>
        importNotes(t.db, [{ title: `import ${i} a` }, { title: `import ${i} b` }]),
      ),
    ]);
    for (const { ids, eventIds } of writes) {
      const recorded = (await Promise.all(ids.map((id) => eventsAbout(t.pool, id)))).flat();
      expect(recorded.map((e) => e.type)).toEqual(ids.map(() => "corpus.note.created"));
      expect(eventIds).toEqual(recorded.map((e) => e.id));
    }
  });

  it("update returns its own event, and none when no watched column changed", async () => {
    const { note } = await createNote(t.db, { title: "Draft" });
    const changed = await updateNote(t.db, note.id, { title: "Final", tags: ["x"] });
    expect(changed.note).toMatchObject({ title: "Final", tags: ["x"] });
    const same = await updateNote(t.db, note.id, { title: "Final", tags: ["x"] });
    expect(same.eventIds).toEqual([]);
    // Nothing changed, so nothing was written: updatedAt is the changing update's.
    expect(same.note).toEqual(changed.note);
    const { rows } = await t.pool.query(`SELECT updated_at FROM corpus_notes WHERE id = $1`, [note.id]);
    expect(rows[0].updated_at).toEqual(changed.note.updatedAt);
    const recorded = await eventsAbout(t.pool, note.id);
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created", "corpus.note.changed"]);
    expect(changed.eventIds).toEqual([recorded[1]!.id]);

    // The same tags in another order are a change, as the trigger sees it.
    const reordered = await updateNote(t.db, note.id, { tags: ["y", "x"] });
    const back = await updateNote(t.db, note.id, { tags: ["x", "y"] });
    expect(reordered.eventIds).toHaveLength(1);
    expect(back.eventIds).toHaveLength(1);
    expect(back.note.updatedAt.getTime()).toBeGreaterThanOrEqual(reordered.note.updatedAt.getTime());
  });

  it("delete returns the deleted event; get then answers not found", async () => {
    const { note } = await createNote(t.db, { title: "Doomed" });
    const { eventIds } = await deleteNote(t.db, note.id);
    const recorded = await eventsAbout(t.pool, note.id);
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created", "corpus.note.deleted"]);
    expect(eventIds).toEqual([recorded[1]!.id]);
    await expect(getNote(t.db, note.id)).rejects.toBeInstanceOf(NotFoundError);
  });

  it("unknown ids are a domain not-found, and record nothing", async () => {
    for (const attempt of [
      () => getNote(t.db, missing),
      () => updateNote(t.db, missing, { title: "x" }),
      () => deleteNote(t.db, missing),
    ]) {
      await expect(attempt()).rejects.toMatchObject({ code: "not_found" } satisfies Partial<DomainError>);
    }
    expect(await eventsAbout(t.pool, missing)).toEqual([]);
  });

  it("does not claim an event another writer of the same note committed while it waited", async () => {
    const { note } = await createNote(t.db, { title: "Contended" });
    const other = await t.pool.connect();
    try {
      await other.query("BEGIN");
      await other.query("UPDATE corpus_notes SET title = 'by other' WHERE id = $1", [note.id]);
      const ours = updateNote(t.db, note.id, { title: "by us" });
      // Let the use case reach the row lock the other writer holds, then commit that writer.
      await waitFor(async () => {
        const { rows } = await t.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        return rows[0].n > 0;
      });
      await other.query("COMMIT");
      const { eventIds } = await ours;
      const recorded = await eventsAbout(t.pool, note.id);
      expect(recorded.map((e) => e.payload.changed)).toEqual([
        ["title", "body", "tags", "scope"],
        ["title"],
        ["title"],
      ]);
      expect(eventIds).toEqual([recorded[2]!.id]);
    } finally {
      other.release();
    }
  });

  it("a write that waited for another's lock is stamped after it: updatedAt and its event's time follow commit order", async () => {
    // Ours begins first and commits second: it waits for the other writer's row lock.
    // With now() (the transaction's start) its event and updatedAt carried the earlier
    // time, so the newest state had the oldest stamp, and webhook receivers ordering
    // by `timestamp` (as the README says to) took the other write for the latest.
    const { note } = await createNote(t.db, { title: "Ordered" });
    const other = await t.pool.connect();
    let begin!: () => void;
    const begun = new Promise<void>((resolve) => (begin = resolve));
    let releaseOurs!: () => void;
    const otherHolds = new Promise<void>((resolve) => (releaseOurs = resolve));
    try {
      const ours = t.db.transaction(async (tx) => {
        await tx.execute(sql`SELECT now()`); // the transaction's start, fixed from here
        begin();
        await otherHolds;
        return updateNote(tx, note.id, { title: "by us, committed last" });
      });
      await begun;
      await new Promise((resolve) => setTimeout(resolve, 20));
      await other.query("BEGIN");
      await other.query(
        "UPDATE corpus_notes SET title = 'by other', updated_at = clock_timestamp() WHERE id = $1",
        [note.id],
      );
      releaseOurs();
      await waitFor(async () => {
        const { rows } = await t.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        return rows[0].n > 0;
      });
      await new Promise((resolve) => setTimeout(resolve, 20));
      await other.query("COMMIT");
      const { note: ourNote } = await ours;

      const recorded = await eventsAbout(t.pool, note.id);
      const [, byOther, byUs] = recorded;
      expect(byUs!.seq).toBeGreaterThan(byOther!.seq);
      expect(+byUs!.createdAt).toBeGreaterThan(+byOther!.createdAt);
      const { rows } = await t.pool.query("SELECT title, updated_at FROM corpus_notes WHERE id = $1", [
        note.id,
      ]);
      expect(rows[0].title).toBe("by us, committed last");
      expect(+ourNote.updatedAt).toBeGreaterThan(+byOther!.createdAt);
    } finally {
      other.release();
    }
  });

  it("run inside a caller's transaction, reports its events and rolls back with it", async () => {
    let inner: string[] = [];
    let noteId = "";
    await expect(
      t.db.transaction(async (tx) => {
        const { note, eventIds } = await createNote(tx, { title: "Nested" });
        inner = eventIds;
        noteId = note.id;
        throw new Error("caller gives up");
      }),
    ).rejects.toThrow("caller gives up");
    expect(inner).toHaveLength(1);
    expect(await eventsAbout(t.pool, noteId)).toEqual([]);
  });

  it("imports 2,000 notes in one transaction and returns 2,000 event ids, one per note", async () => {
    const notes = Array.from({ length: 2_000 }, (_, i) => ({
      title: `bulk ${i}`,
      tags: ["bulk"],
      scope: "t1",
    }));
    const { ids, eventIds } = await importNotes(t.db, notes);
    expect(ids).toHaveLength(2_000);
    expect(new Set(eventIds).size).toBe(2_000);
    const { rows } = await t.pool.query(
      `SELECT e.id, e.subject, e.type FROM events e WHERE e.id = ANY($1::uuid[]) ORDER BY e.seq`,
      [eventIds],
    );
    expect(rows).toHaveLength(2_000);
    expect(rows.every((r) => r.type === "corpus.note.created")).toBe(true);
    expect(rows.map((r) => r.subject)).toEqual(ids);
  });

  it("refuses an import over 2,000 notes and writes nothing", async () => {
    const { rows: before } = await t.pool.query("SELECT count(*)::int AS n FROM events");
    const notes = Array.from({ length: 2_001 }, (_, i) => ({ title: `too many ${i}` }));
    await expect(importNotes(t.db, notes)).rejects.toThrow(/2000 notes/);
    const { rows: after } = await t.pool.query("SELECT count(*)::int AS n FROM events");
    expect(after[0].n).toBe(before[0].n);
  });
});
