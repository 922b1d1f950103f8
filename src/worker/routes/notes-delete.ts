import { deleteNote } from "../../domain/notes/remove.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { idParam } from "./params.ts";

export function registerNotesDelete(app: App) {
  app.delete("/notes/:id", idParam("note"), async (c) => {
    const { id, eventIds } = await deleteNote(c.var.db, c.req.valid("param").id);
    return written(c, { deleted: id }, eventIds);
  });
}
