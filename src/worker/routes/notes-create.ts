import { createNote, createNoteStatements } from "../../domain/notes/create.ts";
import { noteInput, type Note } from "../../domain/notes/schemas.ts";
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
    // What was created (RFC 9110 §15.3.2); a 202 names the event to poll instead.
    const answer = ({ note, eventIds }: { note: Note; eventIds: string[] }) => ({
      result: { note },
      eventIds,
      status: 201 as const,
      location: `/notes/${note.id}`,
    });
    return answerWrite(
      c,
      values,
      async (db) => answer(await createNote(db, values)),
      // With an Idempotency-Key: the create and the key in two round trips.
      (claimed) => {
        const create = createNoteStatements(values, claimed);
        return { statements: create.statements, read: (results) => answer(create.read(results)) };
      },
    );
  });
}
