import { createNote } from "../../domain/notes/create.ts";
import { noteInput } from "../../domain/notes/schemas.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerNotesCreate(app: App) {
  app.post("/notes", valid("json", noteInput), async (c) => {
    const input = c.req.valid("json");
    const scope = ownScope(c, [input.scope], () => "scope");
    const { note, eventIds } = await createNote(c.var.db, { ...input, scope });
    return written(c, { note }, eventIds, 201);
  });
}
