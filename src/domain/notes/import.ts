import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { eventsRecordedSince, highWaterReturned } from "./recorded-events.ts";
import { noteImport, type NoteInput } from "./schemas.ts";

/**
 * Imports up to MAX_IMPORT notes all-or-nothing: one transaction, one multi-row
 * INSERT (2,000 × 4 parameters stays far under Postgres' 65,535 limit), one event
 * per note from the trigger.
 */
export async function importNotes(
  db: Db,
  notes: NoteInput[],
): Promise<{ ids: string[]; eventIds: string[] }> {
  const { notes: values } = noteImport.parse({ notes });
  return db.transaction(async (tx) => {
    // The high-water mark comes back with the rows (recorded-events.ts): one round trip fewer.
    const rows = await tx
      .insert(corpusNotes)
      .values(values)
      .returning({ id: corpusNotes.id, highWater: highWaterReturned });
    const ids = rows.map((r) => r.id);
    return { ids, eventIds: await eventsRecordedSince(tx, rows[0]?.highWater ?? 0, ids) };
  });
}
