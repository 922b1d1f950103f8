import { importNotes } from "../../domain/notes/import.ts";
import { noteImport } from "../../domain/notes/schemas.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { answerWrite } from "../respond.ts";
import { valid } from "../validate.ts";

// Its body cap (larger than other routes') is in body-limit.ts, with the others.
export function registerNotesImport(app: App) {
  app.post("/notes/import", valid("json", noteImport), async (c) => {
    const notes = c.req.valid("json").notes;
    const scope = ownScope(
      c,
      notes.map((n) => n.scope),
      (i) => `notes.${i}.scope`,
    );
    // The scope filled in before the fingerprint, as notes-create.ts does.
    const values = notes.map((n) => ({ ...n, scope }));
    return answerWrite(c, values, async (db) => {
      const { ids, eventIds } = await importNotes(db, values);
      return { result: { ids }, eventIds, status: 201 };
    });
  });
}
