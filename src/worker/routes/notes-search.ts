import { noteSearch } from "../../domain/notes/schemas.ts";
import { searchNotes } from "../../domain/notes/search.ts";
import type { App } from "../new-app.ts";
import { valid } from "../validate.ts";

export function registerNotesSearch(app: App) {
  app.get("/notes/search", valid("query", noteSearch), async (c) => {
    const hits = await searchNotes(c.var.db, c.req.valid("query"));
    return c.json({ hits });
  });
}
