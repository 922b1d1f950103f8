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

/** A note's fields as a change takes them, any of them; an empty one changes nothing. */
export const noteChange = z.strictObject({ title, body, tags, scope }).partial();
export type NotePatch = z.infer<typeof noteChange>;

/** A PATCH's body: a change that names something (naming only the key's own scope counts). */
export const notePatch = noteChange.refine(
  (patch) => Object.keys(patch).length > 0,
  "name at least one of title, body, tags, scope",
);

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
