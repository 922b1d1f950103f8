import { z } from "zod";

// C0 and C1 controls, DEL, and the Unicode line and paragraph separators: none
// belongs in a one-line value, and CR/LF in one that ends up in a header (a mail
// subject) would start a new header there.
const LINE_BREAKING = /[\p{Cc}\u2028\u2029]/u;
// Text may keep tabs and line breaks; other controls (NUL above all, which
// Postgres text cannot hold) are refused.
const NOT_TEXT = /(?![\t\n\r])\p{Cc}/u;

/**
 * A one-line value (a title, a name, a scope, a tag, a filter). Checked before
 * trimming, so a trailing CR/LF is refused rather than silently dropped.
 */
export function singleLine(max: number, notAString?: string | ((issue: { input?: unknown }) => string)) {
  return (
    z
      // Without its own words, a wrong type gets the validator's ("must be a string").
      .string(notAString === undefined ? undefined : { error: notAString })
      // abort: a value with a line break is refused for that alone, not also by every
      // rule a caller's schema adds after (a type glob's), which named the field twice.
      .refine((v) => !LINE_BREAKING.test(v), {
        message: "must not contain control characters or line breaks",
        abort: true,
      })
      .trim()
      .min(1, "must not be empty")
      // Said here: a schema's own `error` would otherwise answer for this check too.
      .max(max, `must be at most ${max} characters`)
  );
}

/** The longest scope a row, a key or an endpoint may have. */
export const SCOPE_MAX = 128;

/**
 * A scope in a body (a note's, a supplier's, a key's, an endpoint's): a scope, or
 * null for none. A number was told "must be a string", and null is as good.
 */
/**
 * A row's, key's or endpoint's scope: a string, or null for none. Where it is
 * required, a body without it hears what to send: "is required" alone left a caller
 * creating an unscoped endpoint guessing that `null` is how a body says so.
 */
export const scopeValue = singleLine(SCOPE_MAX, (issue) =>
  issue.input === undefined
    ? "is required: a scope, or null for none"
    : "must be a string or null (no scope)",
).nullable();

/**
 * A scope filter in a query string: a scope, or `?scope=` with no value for the rows
 * without one (a real scope is never empty). Absent: no filter.
 */
export const scopeFilter = z
  .string()
  .refine(
    (s) => s === "" || singleLine(SCOPE_MAX).safeParse(s).success,
    `must be one line of at most ${SCOPE_MAX} characters, or empty for rows without a scope`,
  )
  .trim()
  .optional()
  .transform((s) => (s === undefined ? undefined : s === "" ? null : s));

/** Free text (a note body): line breaks and tabs allowed, other control characters not. */
export function multiLine(max: number) {
  return z
    .string()
    .max(max)
    .refine((v) => !NOT_TEXT.test(v), "must not contain control characters other than tab and line breaks");
}

/**
 * A form field or query parameter left blank, or a var declared empty, means absent:
 * for `z.preprocess` in front of an optional schema.
 */
export const blankIsAbsent = (v: unknown): unknown =>
  typeof v === "string" && v.trim() === "" ? undefined : v;

/**
 * A dashboard page's `before` (an id the previous page ended on): blank is absent,
 * else a whole number from 1 that a Number holds exactly.
 */
export const idCursor = z.preprocess(
  blankIsAbsent,
  z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER).optional(),
);

/** For output built from stored values (a mail subject): any control character becomes a space. */
export function oneLine(value: string): string {
  return value.replace(new RegExp(LINE_BREAKING.source, "gu"), " ");
}

/**
 * A whole number given as text (a query parameter) or a number: digits only, so
 * `1e2`, `0x10`, `1.0` or ` 5` are refused rather than read the way Number() would.
 */
export function wholeNumber(min: number, max: number) {
  // Past this, a Number no longer holds every digit it was given.
  const ceiling = Math.min(max, Number.MAX_SAFE_INTEGER);
  return (
    z
      .union([z.number(), z.string()])
      .transform((v) => String(v))
      .pipe(z.string().regex(/^\d+$/, "must be a whole number"))
      // More digits than the ceiling has is past it: said so, rather than "not a
      // whole number" (or read as a Number that lost its last digits).
      .transform((v) => {
        const digits = v.replace(/^0+(?=\d)/, "");
        return digits.length > String(ceiling).length ? ceiling + 1 : Number(digits);
      })
      // No .int(): digits are whole already, and its safe-integer check said "too big"
      // a second time for a number past the ceiling.
      .pipe(z.number().min(min, `must be at least ${min}`).max(ceiling, `must be at most ${ceiling}`))
  );
}

/** SHA-256 of `text` (UTF-8) in lower-case hex: an API key's stored hash, a request's fingerprint. */
export async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** JSON.parse, or undefined for text that is not JSON: for bodies a caller checks with a schema next. */
export function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
