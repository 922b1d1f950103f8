import { describe, expect, it } from "vitest";
import { refreshNoteIndex } from "../../src/domain/corpus-index/refresh.ts";
import { createNote } from "../../src/domain/notes/create.ts";
import { deleteNote } from "../../src/domain/notes/remove.ts";
import { searchNotes } from "../../src/domain/notes/search.ts";
import { updateNote } from "../../src/domain/notes/update.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";

const t = useTestDatabase();

/** Does what the corpus.index subscriber will do for the note's latest event. */
async function index(noteId: string) {
  const latest = (await eventsAbout(t.pool, noteId)).at(-1)!;
  return refreshNoteIndex(t.db, { noteId, eventSeq: latest.seq });
}

describe("search over the corpus index", () => {
  it("finds nothing until the subscriber indexed the note, then finds it by any word", async () => {
    const { note } = await createNote(t.db, {
      title: "Quarterly harvest report",
      body: "Pumpkins grew well.",
    });
    expect(await searchNotes(t.db, { q: "pumpkins" })).toEqual([]);
    expect(await index(note.id)).toBe("indexed");
    const hits = await searchNotes(t.db, { q: "pumpkin" });
    expect(hits.map((h) => h.noteId)).toEqual([note.id]);
    expect(hits[0]).toMatchObject({ title: "Quarterly harvest report", scope: null });
  });

  it("ranks a title match above a body match and filters by scope", async () => {
    const inTitle = await createNote(t.db, { title: "Zeppelin maintenance", scope: "air" });
    const inBody = await createNote(t.db, { title: "Misc", body: "one zeppelin mentioned", scope: "air" });
    const elsewhere = await createNote(t.db, { title: "Zeppelin elsewhere", scope: "sea" });
    for (const n of [inTitle, inBody, elsewhere]) await index(n.note.id);
    const hits = await searchNotes(t.db, { q: "zeppelin", scope: "air" });
    expect(hits.map((h) => h.noteId)).toEqual([inTitle.note.id, inBody.note.id]);
  });

  it("accepts what people type without a syntax error", async () => {
    await expect(searchNotes(t.db, { q: '"unclosed & | !(' })).resolves.toEqual([]);
  });

  it("follows changes, never lets an older job overwrite a newer row, and drops deleted notes", async () => {
    const { note } = await createNote(t.db, { title: "Alpha" });
    const created = (await eventsAbout(t.pool, note.id))[0]!;
    await updateNote(t.db, note.id, { title: "Bravo" });
    await index(note.id);
    expect((await searchNotes(t.db, { q: "bravo" })).map((h) => h.noteId)).toEqual([note.id]);

    // The created event's job arrives late, after the row for the change was written.
    expect(await refreshNoteIndex(t.db, { noteId: note.id, eventSeq: created.seq })).toBe("superseded");

    await deleteNote(t.db, note.id);
    expect(await index(note.id)).toBe("removed");
    expect(await searchNotes(t.db, { q: "bravo" })).toEqual([]);
    // A late job for an event before the delete must not bring it back.
    expect(await refreshNoteIndex(t.db, { noteId: note.id, eventSeq: created.seq })).toBe("removed");
    expect(await searchNotes(t.db, { q: "alpha" })).toEqual([]);
  });
});
