import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { Db } from "../../src/domain/db.ts";
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

describe("a tenant's search", () => {
  /** What Postgres did for the search's own statement: every node of its plan, with its counts. */
  async function planOf(run: (db: Db) => Promise<unknown>) {
    const seen: { query: string; params: unknown[] }[] = [];
    const logged = drizzle({
      client: t.pool,
      logger: { logQuery: (query, params) => void seen.push({ query, params }) },
    }) as unknown as Db;
    await run(logged);
    const [statement] = seen;
    const { rows } = await t.pool.query(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${statement!.query}`,
      statement!.params as unknown[],
    );
    const nodes: Record<string, unknown>[] = [];
    const walk = (node: Record<string, unknown>) => {
      nodes.push(node);
      for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    walk(rows[0]["QUERY PLAN"][0].Plan);
    return nodes;
  }

  it("reads its own scope's rows through the scope index, not every tenant's matches", async () => {
    // 3,000 notes of another tenant that match the words, 2 of this one's.
    await t.pool.query(
      `INSERT INTO corpus_index (note_id, scope, title, document, source_event_seq)
       SELECT gen_random_uuid(), CASE WHEN i <= 2 THEN 'acme-search' ELSE 'globex-search' END, 'q',
              to_tsvector('english', 'quokka sighting ' || i), i
         FROM generate_series(1, 3002) i`,
    );
    await t.pool.query("ANALYZE corpus_index");
    for (const scope of ["acme-search", null]) {
      const nodes = await planOf((db) => searchNotes(db, { q: "quokka" }, { scope }));
      const removed = nodes.reduce(
        (n, node) =>
          n +
          Number(node["Rows Removed by Filter"] ?? 0) +
          Number(node["Rows Removed by Index Recheck"] ?? 0),
        0,
      );
      // IS NOT DISTINCT FROM, which no index serves, read all 3,002 matches and dropped 3,000.
      expect(removed, JSON.stringify(nodes.map((n) => [n["Node Type"], n["Index Name"]]))).toBeLessThan(50);
      expect(nodes.some((n) => n["Index Name"] === "corpus_index_scope_idx")).toBe(true);
    }
    expect((await searchNotes(t.db, { q: "quokka" }, { scope: "acme-search" })).length).toBe(2);
    expect(await searchNotes(t.db, { q: "quokka" }, { scope: null })).toEqual([]);
  });
});
