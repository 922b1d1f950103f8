import { and, eq } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { inScope, type Within } from "../scope.ts";
import type { Note } from "./schemas.ts";

export async function getNote(db: Db, id: string, within?: Within): Promise<Note> {
  const [note] = await db
    .select()
    .from(corpusNotes)
    .where(and(eq(corpusNotes.id, id), inScope(corpusNotes.scope, within)));
  if (!note) throw new NotFoundError("note", id);
  return note;
}
