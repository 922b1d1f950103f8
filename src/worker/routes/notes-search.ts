import { noteSearch } from "../../domain/notes/schemas.ts";
import { searchNotes } from "../../domain/notes/search.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { valid } from "../validate.ts";

export function registerNotesSearch(app: App) {
  app.get("/notes/search", valid("query", noteSearch), async (c) => {
    const query = c.req.valid("query");
    ownScope(c, [query.scope], () => "scope");
    const hits = await searchNotes(c.var.db, { ...query, scope: undefined }, c.var.tenant);
    return c.json({ hits });
  });
}
