import { z } from "zod";
import type { corpusNotes } from "../schema.ts";
import { multiLine, scopeFilter, scopeValue, singleLine, wholeNumber } from "../text.ts";

export const MAX_IMPORT = 2_000;

const title = singleLine(300);
const body = multiLine(100_000);
const tags = z.array(singleLine(64)).max(32);
const scope = scopeValue;

export const noteInput = z.strictObject({
  title,
  body: body.default(""),
  tags: tags.default([]),
  // Absent: no scope (the column is null); the Worker tells absent from null to check it against the key.
  scope: scope.optional(),
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
  q: singleLine(500),
  // `?scope=` with no value: the notes without a scope, as on every other filter.
  scope: scopeFilter,
  limit: wholeNumber(1, 100).default(20),
});
export type NoteSearch = z.input<typeof noteSearch>;

export type Note = typeof corpusNotes.$inferSelect;
