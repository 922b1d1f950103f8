import { notePatch } from "../../domain/notes/schemas.ts";
import { updateNote } from "../../domain/notes/update.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { answerWrite } from "../respond.ts";
import { valid } from "../validate.ts";
import { ID } from "./params.ts";

export function registerNotesUpdate(app: App) {
  app.patch(`/notes/${ID}`, valid("json", notePatch), async (c) => {
    const patch = c.req.valid("json");
    // A note cannot be moved to another tenant's scope.
    ownScope(c, [patch.scope], () => "scope");
    return answerWrite(c, patch, async (db) => {
      const { note, eventIds } = await updateNote(db, c.req.param("id"), patch, c.var.tenant);
      return { result: { note }, eventIds };
    });
  });
}
