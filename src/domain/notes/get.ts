import { eq } from "drizzle-orm";
import { corpusNotes } from "../schema.ts";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import type { Note } from "./schemas.ts";

export async function getNote(db: Db, id: string): Promise<Note> {
  const [note] = await db.select().from(corpusNotes).where(eq(corpusNotes.id, id));
  if (!note) throw new NotFoundError("note", id);
  return note;
}
