import { deleteNote } from "../../domain/notes/remove.ts";
import type { App } from "../new-app.ts";
import { answerWrite } from "../respond.ts";
import { ID } from "./params.ts";

export function registerNotesDelete(app: App) {
  app.delete(`/notes/${ID}`, async (c) => {
    return answerWrite(c, null, async (db) => {
      const { id, eventIds } = await deleteNote(db, c.req.param("id"), c.var.tenant);
      return { result: { deleted: id }, eventIds };
    });
  });
}
