import { deleteNote } from "../../domain/notes/remove.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { ID } from "./params.ts";

export function registerNotesDelete(app: App) {
  app.delete(`/notes/${ID}`, async (c) => {
    const { id, eventIds } = await deleteNote(c.var.db, c.req.param("id"), c.var.tenant);
    return written(c, { deleted: id }, eventIds);
  });
}
