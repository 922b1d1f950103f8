import { notePatch } from "../../domain/notes/schemas.ts";
import { updateNote } from "../../domain/notes/update.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";
import { ID } from "./params.ts";

export function registerNotesUpdate(app: App) {
  app.patch(`/notes/${ID}`, valid("json", notePatch), async (c) => {
    const { note, eventIds } = await updateNote(c.var.db, c.req.param("id"), c.req.valid("json"));
    return written(c, { note }, eventIds);
  });
}
