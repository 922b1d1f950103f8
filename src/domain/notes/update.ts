import { eq, sql } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { eventsHighWater, eventsRecordedSince } from "./recorded-events.ts";
import { lockNoteRow } from "./lock.ts";
import type { Within } from "../scope.ts";
import { noteChange, type Note, type NotePatch } from "./schemas.ts";

/**
 * Changes a note. The trigger records `corpus.note.changed` only when a watched
 * column actually changed; a patch that changes nothing is not written at all, so
 * it returns no event ids and leaves `updatedAt` as it was.
 */
export async function updateNote(
  db: Db,
  id: string,
  patch: NotePatch,
  within?: Within,
): Promise<{ note: Note; eventIds: string[] }> {
  // Not notePatch: the route leaves out the scope a key names (its own, so no change),
  // and `{"scope": <own>}` reached here as {} and failed that rule's parse with a 500.
  const values = noteChange.parse(patch);
  return db.transaction(async (tx) => {
    const current = await lockNoteRow(tx, id, within);
    if (!changes(current, values)) return { note: current, eventIds: [] };
    const highWater = await eventsHighWater(tx);
    const [note] = await tx
      .update(corpusNotes)
      // The time of this write, after the lock above was granted, not of the
      // transaction's start: a patch that waited behind another commits after it and
      // must not carry an earlier updatedAt (as the event's created_at, migration 0015).
      .set({ ...values, updatedAt: sql`clock_timestamp()` })
      .where(eq(corpusNotes.id, id))
      .returning();
    if (!note) throw new Error("updateNote: the locked row vanished");
    // The row's id, not the asked one: a UUID asked in capitals matched the row, and
    // its events' subject (text) is the row's lower case.
    return { note, eventIds: await eventsRecordedSince(tx, highWater, [note.id]) };
  });
}

/**
 * Whether the patch differs from the row, as the trigger's IS DISTINCT FROM judges
 * it: text compares by its characters (the database's collation is deterministic),
 * tags element by element, a null scope only equals null.
 */
function changes(note: Note, patch: NotePatch): boolean {
  if (patch.title !== undefined && patch.title !== note.title) return true;
  if (patch.body !== undefined && patch.body !== note.body) return true;
  if (patch.scope !== undefined && patch.scope !== note.scope) return true;
  if (patch.tags !== undefined) {
    const tags = note.tags;
    if (patch.tags.length !== tags.length || patch.tags.some((tag, i) => tag !== tags[i])) return true;
  }
  return false;
}
