import { eq } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { eventsHighWater, eventsRecordedSince } from "./recorded-events.ts";
import { lockNote } from "./lock.ts";
import type { Within } from "../scope.ts";

/** Deletes a note; the trigger records `corpus.note.deleted`. */
export async function deleteNote(
  db: Db,
  id: string,
  within?: Within,
): Promise<{ id: string; eventIds: string[] }> {
  return db.transaction(async (tx) => {
    const noteId = await lockNote(tx, id, within);
    const highWater = await eventsHighWater(tx);
    await tx.delete(corpusNotes).where(eq(corpusNotes.id, noteId));
    return { id: noteId, eventIds: await eventsRecordedSince(tx, highWater, [noteId]) };
  });
}
