import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { getTableColumns } from "drizzle-orm";
import { eventsRecordedSince, highWaterReturned } from "./recorded-events.ts";
import { noteInput, type Note, type NoteInput } from "./schemas.ts";

/** Creates a note; the table's trigger records `corpus.note.created` in the same transaction. */
export async function createNote(db: Db, input: NoteInput): Promise<{ note: Note; eventIds: string[] }> {
  const values = noteInput.parse(input);
  return db.transaction(async (tx) => {
    // The high-water mark comes back with the row (recorded-events.ts), not from a statement of its own.
    const [row] = await tx
      .insert(corpusNotes)
      .values(values)
      .returning({ ...getTableColumns(corpusNotes), highWater: highWaterReturned });
    if (!row) throw new Error("createNote: INSERT returned no row");
    const { highWater, ...note } = row;
    return { note, eventIds: await eventsRecordedSince(tx, highWater, [note.id]) };
  });
}
