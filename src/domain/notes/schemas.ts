import { z } from "zod";
import type { corpusNotes } from "../schema.ts";

export const MAX_IMPORT = 2_000;

const title = z.string().trim().min(1, "must not be empty").max(300);
const body = z.string().max(100_000);
const tags = z.array(z.string().trim().min(1, "must not be empty").max(64)).max(32);
const scope = z.string().trim().min(1, "must not be empty").max(128).nullable();

export const noteInput = z.strictObject({
  title,
  body: body.default(""),
  tags: tags.default([]),
  scope: scope.default(null),
});
export type NoteInput = z.input<typeof noteInput>;

export const notePatch = z
  .strictObject({ title, body, tags, scope })
  .partial()
  .refine((patch) => Object.keys(patch).length > 0, "name at least one of title, body, tags, scope");
export type NotePatch = z.infer<typeof notePatch>;

export const noteImport = z.strictObject({
  notes: z
    .array(noteInput)
    .min(1, "must hold at least one note")
    .max(MAX_IMPORT, `at most ${MAX_IMPORT} notes`),
});

export const noteSearch = z.strictObject({
  q: z.string().trim().min(1, "must not be empty").max(500),
  scope: z.string().trim().min(1).max(128).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});
export type NoteSearch = z.input<typeof noteSearch>;

export type Note = typeof corpusNotes.$inferSelect;
