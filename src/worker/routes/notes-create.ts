import { createNote } from "../../domain/notes/create.ts";
import { noteInput } from "../../domain/notes/schemas.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { answerWrite } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerNotesCreate(app: App) {
  app.post("/notes", valid("json", noteInput), async (c) => {
    const input = c.req.valid("json");
    // The scope filled in before the fingerprint: naming the key's own scope or leaving
    // it out is one request, as written-out defaults are.
    const values = { ...input, scope: ownScope(c, [input.scope], () => "scope") };
    return answerWrite(c, values, async (db) => {
      const { note, eventIds } = await createNote(db, values);
      // What was created (RFC 9110 §15.3.2); a 202 names the event to poll instead.
      return { result: { note }, eventIds, status: 201, location: `/notes/${note.id}` };
    });
  });
}
