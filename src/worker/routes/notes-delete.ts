import { deleteNote } from "../../domain/notes/remove.ts";
import type { App } from "../new-app.ts";
import { answerWrite } from "../respond.ts";
import { noBody } from "../validate.ts";
import { ID } from "./params.ts";

export function registerNotesDelete(app: App) {
  // No body, as the other actions: a field (a scope, a "force") is refused before it runs.
  app.delete(`/notes/${ID}`, noBody, async (c) => {
    return answerWrite(c, null, async (db) => {
      const { id, eventIds } = await deleteNote(db, c.req.param("id"), c.var.tenant);
      return { result: { deleted: id }, eventIds };
    });
  });
}
