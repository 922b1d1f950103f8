import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { eventsHighWater, eventsRecordedSince } from "./recorded-events.ts";
import { noteInput, type Note, type NoteInput } from "./schemas.ts";

/** Creates a note; the table's trigger records `corpus.note.created` in the same transaction. */
export async function createNote(db: Db, input: NoteInput): Promise<{ note: Note; eventIds: string[] }> {
  const values = noteInput.parse(input);
  return db.transaction(async (tx) => {
    const highWater = await eventsHighWater(tx);
    const [note] = await tx.insert(corpusNotes).values(values).returning();
    if (!note) throw new Error("createNote: INSERT returned no row");
    return { note, eventIds: await eventsRecordedSince(tx, highWater, [note.id]) };
  });
}
