import { and, eq } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { inScope, type Within } from "../scope.ts";
import type { Note } from "./schemas.ts";

/**
 * Takes the note's row lock for the rest of the transaction, so no other writer
 * records an event about it until we commit (see recorded-events.ts). Answers the
 * id as the row holds it: a UUID may be asked for in capitals, and its events'
 * subject is the row's lower-case text.
 */
export async function lockNote(tx: Db, id: string, within?: Within): Promise<string> {
  return found(
    await tx.select({ id: corpusNotes.id }).from(corpusNotes).where(ofNote(id, within)).for("update"),
    id,
  ).id;
}

/**
 * The same lock, and the row as it stands once the lock is held (another writer's
 * commit included), for a writer that compares with it. Only that writer reads the
 * whole row: a delete has no use for a body of up to 100,000 characters.
 */
export async function lockNoteRow(tx: Db, id: string, within?: Within): Promise<Note> {
  return found(await tx.select().from(corpusNotes).where(ofNote(id, within)).for("update"), id);
}

function ofNote(id: string, within: Within | undefined) {
  return and(eq(corpusNotes.id, id), inScope(corpusNotes.scope, within));
}

function found<T>(rows: T[], id: string): T {
  const [row] = rows;
  if (!row) throw new NotFoundError("note", id);
  return row;
}
