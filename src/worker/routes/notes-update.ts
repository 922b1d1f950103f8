import { notePatch } from "../../domain/notes/schemas.ts";
import { updateNote } from "../../domain/notes/update.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { answerWrite } from "../respond.ts";
import { valid } from "../validate.ts";
import { ID } from "./params.ts";

export function registerNotesUpdate(app: App) {
  app.patch(`/notes/${ID}`, valid("json", notePatch), async (c) => {
    // A note cannot be moved to another tenant's scope. Naming its own changes
    // nothing (the key sees only its scope's notes), so it is left out before the
    // fingerprint: with it or without, one request, as for creates.
    const { scope: named, ...change } = c.req.valid("json");
    ownScope(c, [named], () => "scope");
    return answerWrite(c, change, async (db) => {
      const { note, eventIds } = await updateNote(db, c.req.param("id"), change, c.var.tenant);
      return { result: { note }, eventIds };
    });
  });
}
