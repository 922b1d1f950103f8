import { createNote } from "../../domain/notes/create.ts";
import { noteInput } from "../../domain/notes/schemas.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerNotesCreate(app: App) {
  app.post("/notes", valid("json", noteInput), async (c) => {
    const { note, eventIds } = await createNote(c.var.db, c.req.valid("json"));
    return written(c, { note }, eventIds, 201);
  });
}
