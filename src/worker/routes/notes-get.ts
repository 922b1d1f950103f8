import { getNote } from "../../domain/notes/get.ts";
import type { App } from "../new-app.ts";
import { noQuery } from "../validate.ts";
import { ID } from "./params.ts";

export function registerNotesGet(app: App) {
  app.get(`/notes/${ID}`, noQuery, async (c) => {
    const note = await getNote(c.var.db, c.req.param("id"), c.var.tenant);
    return c.json({ note });
  });
}
