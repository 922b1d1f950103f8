import { eq, sql } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { eventsHighWater, eventsRecordedSince } from "./recorded-events.ts";
import { lockNote } from "./lock.ts";
import type { Within } from "../scope.ts";
import { notePatch, type Note, type NotePatch } from "./schemas.ts";

/**
 * Changes a note. The trigger records `corpus.note.changed` only when a watched
 * column actually changed, so a patch that changes nothing returns no event ids.
 */
export async function updateNote(
  db: Db,
  id: string,
  patch: NotePatch,
  within?: Within,
): Promise<{ note: Note; eventIds: string[] }> {
  const values = notePatch.parse(patch);
  return db.transaction(async (tx) => {
    await lockNote(tx, id, within);
    const highWater = await eventsHighWater(tx);
    const [note] = await tx
      .update(corpusNotes)
      .set({ ...values, updatedAt: sql`now()` })
      .where(eq(corpusNotes.id, id))
      .returning();
    if (!note) throw new Error("updateNote: the locked row vanished");
    return { note, eventIds: await eventsRecordedSince(tx, highWater, [id]) };
  });
}
