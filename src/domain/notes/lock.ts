import { and, eq } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { inScope, type Within } from "../scope.ts";
import type { Note } from "./schemas.ts";

/**
 * Takes the note's row lock for the rest of the transaction, so no other writer
 * records an event about it until we commit (see recorded-events.ts), and returns
 * the row as it stands once the lock is held (another writer's commit included).
 */
export async function lockNote(tx: Db, id: string, within?: Within): Promise<Note> {
  const [row] = await tx
    .select()
    .from(corpusNotes)
    .where(and(eq(corpusNotes.id, id), inScope(corpusNotes.scope, within)))
    .for("update");
  if (!row) throw new NotFoundError("note", id);
  return row;
}
