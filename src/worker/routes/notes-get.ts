import { getNote } from "../../domain/notes/get.ts";
import type { App } from "../new-app.ts";
import { idParam } from "./params.ts";

export function registerNotesGet(app: App) {
  app.get("/notes/:id", idParam("note"), async (c) => {
    const note = await getNote(c.var.db, c.req.valid("param").id);
    return c.json({ note });
  });
}
