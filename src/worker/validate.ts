import type { Context, MiddlewareHandler, ValidationTargets } from "hono";
import { HTTPException } from "hono/http-exception";
import { validator } from "hono/validator";
import { z } from "zod";
import type { Config, HonoEnv } from "./env.ts";
import { ApiError, issueError, type FieldIssue } from "./errors.ts";

/**
 * Hono's validator with a zod schema: valid input reaches the handler typed, and
 * invalid input answers 400 with one issue per bad field, named by its path.
 */
export function valid<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schema: Schema,
) {
  return bodyFirst(
    target,
    validator(target, (value, c: Context<HonoEnv>) => parseOrThrow(c, target, schema, value)),
  );
}

/**
 * For actions that take no body (activate, connect, a note's delete,
 * rotate-secret, test, redeliver): none, or `{}`. A field is refused as every route refuses one it does
 * not know, so a caller who thought the action took options hears it does not
 * before it runs, not after.
 */
export const noBody: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if ((await c.req.text()).trim() === "") return next();
  return valid("json", z.strictObject({}))(c, next);
};

/**
 * For reads that take no query (one note, supplier, event, endpoint or delivery by
 * id; the operator's stats): a parameter is refused as a search's unknown one is.
 * `GET /suppliers/<id>?scope=other` answered the key's own supplier with a 200, to a
 * caller who thought it had named another scope.
 */
export const noQuery = valid("query", z.strictObject({}));

/** `valid` for a schema that depends on the bindings (e.g. what URLs a deployment accepts). */
export function validFor<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schemaFor: (config: Config) => Schema,
) {
  return bodyFirst(
    target,
    validator(target, (value, c: Context<HonoEnv>) =>
      parseOrThrow(c, target, schemaFor(c.var.config), value),
    ),
  );
}

/**
 * `valid` without the throw: the handler gets `{ ok: true, data }`, or `{ ok: false,
 * issues, input }` with the issues a 400 would name and what was sent, for a page that
 * answers a refused form with the form again (the dashboard's events filter).
 */
export function validOrIssues<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schema: Schema,
) {
  return bodyFirst(
    target,
    validator(target, (value) => checkInput(target, schema, value)),
  );
}

/** What valid and validOrIssues check: storable text, then the schema, in the API's words. */
async function checkInput<Schema extends z.ZodType>(
  target: keyof ValidationTargets,
  schema: Schema,
  value: unknown,
): Promise<
  { ok: true; data: z.output<Schema> } | { ok: false; issues: FieldIssue[]; input: Record<string, unknown> }
> {
  refuseUnstorable(value, describe(target));
  const result = await schema.safeParseAsync(value, { error: plainWords(target) });
  if (result.success) return { ok: true, data: result.data as z.output<Schema> };
  return { ok: false, issues: toFieldIssues(result.error, value), input: value as Record<string, unknown> };
}

async function parseOrThrow<Schema extends z.ZodType>(
  c: Context<HonoEnv>,
  target: keyof ValidationTargets,
  schema: Schema,
  value: unknown,
): Promise<z.output<Schema>> {
  const checked = await checkInput(target, schema, value);
  if (checked.ok) return checked.data;
  throw invalidInput(`invalid ${describe(target)}`, checked.issues);
}

/**
 * What a body must be before its validator parses it: of the route's media type
 * (requireMediaType), and for JSON, UTF-8 bytes. The platform's decoder
 * puts U+FFFD in place of any byte sequence that is not, and a note was stored
 * changed, with a 201, so the bytes are decoded strictly first; the body is cached,
 * and the parser then reads the same bytes, not the request again. Checked where the
 * body is parsed, after the route's auth, so a caller without a key learns nothing.
 */
function bodyFirst<M>(target: keyof ValidationTargets, check: M): M {
  if (target !== "json" && target !== "form") return check;
  const first: MiddlewareHandler = async (c, next) => {
    // The type first: bytes named as another charset are refused for that (415).
    requireMediaType(c.req.header("content-type"), target);
    requireIdentityCoding(c);
    let empty = true;
    if (target === "json" && c.req.raw.body) {
      const bytes = await c.req.arrayBuffer();
      empty = bytes.byteLength === 0;
      try {
        STRICT_UTF8.decode(bytes);
      } catch {
        throw new ApiError("BAD_REQUEST", "the body is not valid UTF-8, which JSON must be (RFC 8259 §8.1)");
      }
    }
    if (target !== "json") return (check as MiddlewareHandler)(c, next);
    // Hono's validator parses the JSON and, when it cannot, throws its own 400
    // ("Malformed JSON in request body") before calling next: said in this API's
    // form, as every other bad body is. Parsing here instead would parse twice.
    let reached = false;
    try {
      return await (check as MiddlewareHandler)(c, async () => {
        reached = true;
        await next();
      });
    } catch (error) {
      if (reached || !(error instanceof HTTPException) || error.status !== 400) throw error;
      const message = empty ? "must not be empty: send a JSON object" : "must be valid JSON";
      throw invalidInput("invalid body", [{ path: "", message }]);
    }
  };
  return first as M;
}

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A body is read as sent: a gzipped one was parsed as its compressed bytes and told
 * it was not UTF-8. An unsupported content coding is a 415 naming the one taken
 * (RFC 9110 §15.5.16, with Accept-Encoding).
 */
function requireIdentityCoding(c: Context): void {
  const coding = (c.req.header("content-encoding") ?? "").trim().toLowerCase();
  if (coding === "" || coding === "identity") return;
  c.header("Accept-Encoding", "identity");
  throw new ApiError(
    "UNSUPPORTED_MEDIA_TYPE",
    `the body must be sent uncompressed (no Content-Encoding), got Content-Encoding: ${coding.slice(0, 40)}`,
  );
}

/**
 * What a field's issue says when its schema gave no message of its own (a schema's
 * message always wins): zod's defaults ("Too big: expected string to have <=300
 * characters", "Invalid input") read differently from every message this API
 * writes. A query parameter given twice arrives as an array, and is said so.
 */
export function plainWords(target: keyof ValidationTargets) {
  return (issue: z.core.$ZodRawIssue): string | undefined => {
    if (issue.input === undefined) return "is required";
    if (target === "query" && Array.isArray(issue.input)) return "must be given once";
    switch (issue.code) {
      case "invalid_type":
        return `must be ${TYPE_NAMES[issue.expected] ?? issue.expected}`;
      case "too_big": {
        const most = String(issue.maximum);
        if (issue.origin === "string") return `must be at most ${most} characters`;
        if (issue.origin === "array" || issue.origin === "set") return `must hold at most ${most}`;
        return issue.inclusive === false ? `must be less than ${most}` : `must be at most ${most}`;
      }
      case "too_small": {
        const least = String(issue.minimum);
        const empty = issue.minimum === 1 && issue.inclusive !== false;
        if (issue.origin === "string")
          return empty ? "must not be empty" : `must be at least ${least} characters`;
        if (issue.origin === "array" || issue.origin === "set")
          return empty ? "must not be empty" : `must hold at least ${least}`;
        return issue.inclusive === false ? `must be more than ${least}` : `must be at least ${least}`;
      }
      case "invalid_value":
        // zod's "Invalid option: expected one of "true"|"false"".
        return `must be ${oneOf(issue.values.map(String))}`;
      default:
        return undefined;
    }
  };
}

/** "a", "a or b", "a, b or c". */
function oneOf(values: string[]): string {
  return values.length <= 1
    ? (values[0] ?? "")
    : `${values.slice(0, -1).join(", ")} or ${values[values.length - 1]!}`;
}

const TYPE_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "a whole number",
  boolean: "true or false",
  object: "an object",
  array: "an array",
  null: "null",
};

/** The 400 for `issues`, after `lead` ("invalid body"), naming the first LISTED_ISSUES_MAX. */
export function invalidInput(lead: string, issues: FieldIssue[]): ApiError {
  return issueError("BAD_REQUEST", lead, issues);
}

const JSON_TYPE = /^application\/([\w.-]+\+)?json$/;
const FORM_TYPES = ["application/x-www-form-urlencoded", "multipart/form-data"];

/**
 * Hono's validator reads a body only when its Content-Type matches and otherwise
 * validates `{}`: a JSON body sent as text/plain came back as "title: is required".
 * The honest answer is 415, naming what to send.
 */
export function requireMediaType(header: string | undefined, target: "json" | "form"): void {
  const [first = "", ...parameters] = (header ?? "").split(";");
  const type = first.trim().toLowerCase();
  const ok = target === "json" ? JSON_TYPE.test(type) : FORM_TYPES.includes(type);
  if (ok) {
    // JSON is UTF-8 (RFC 8259 §8.1) and the body is read as UTF-8 whatever the header
    // says: a Latin-1 "café" was stored as "caf\ufffd". A caller naming another
    // charset is told so rather than having its text changed.
    const charset = parameters
      .map((p) => p.trim().match(/^charset\s*=\s*"?([^"]*)"?$/i)?.[1])
      .find((c) => c !== undefined);
    if (target === "json" && charset !== undefined && charset.trim().toLowerCase() !== "utf-8") {
      throw new ApiError(
        "UNSUPPORTED_MEDIA_TYPE",
        `the body must be UTF-8 (charset=utf-8, or none), got charset=${charset.trim().slice(0, 40)}`,
      );
    }
    return;
  }
  const want = target === "json" ? "application/json" : FORM_TYPES.join(" or ");
  throw new ApiError(
    "UNSUPPORTED_MEDIA_TYPE",
    `the body must be sent as ${want}, got ${type ? `"${type}"` : "no Content-Type"}`,
  );
}

/**
 * Text Postgres would not keep as sent: U+0000, which it cannot hold (a NUL that
 * reached a query failed it with "invalid byte sequence", a 500), and a lone UTF-16
 * surrogate (`"\ud800"` in JSON), which has no UTF-8 form and was stored as U+FFFD,
 * silently, in place of what the caller sent. Every string a caller sends (values
 * and keys, at any depth, in a body, query or form) passes here before any schema
 * or SQL sees it, so no route can forget the check. Each offending field is named.
 *
 * No input of any route nests deeper than a few levels, so anything past
 * INPUT_DEPTH_MAX is refused here: this walk (and Postgres' own JSON parser, for a
 * value that reached it) recurses per level, and 5,000 nested arrays, a 10 KB
 * body, overflowed the stack and answered 500.
 */
export function refuseUnstorable(value: unknown, what: string): void {
  const issues: FieldIssue[] = [];
  const visit = (v: unknown, path: string, depth: number) => {
    if (typeof v === "string") {
      const wrong = unstorable(v);
      if (wrong) issues.push({ path, message: wrong });
      return;
    }
    if (v === null || typeof v !== "object") return;
    if (depth === INPUT_DEPTH_MAX) {
      throw invalidInput(`invalid ${what}`, [
        { path, message: `nests deeper than ${INPUT_DEPTH_MAX} levels` },
      ]);
    }
    if (Array.isArray(v)) {
      v.forEach((item, i) => visit(item, path ? `${path}.${i}` : String(i), depth + 1));
      return;
    }
    for (const [key, item] of Object.entries(v)) {
      const at = path ? `${path}.${key}` : key;
      const wrong = unstorable(key);
      if (wrong) issues.push({ path: at, message: wrong });
      else visit(item, at, depth + 1);
    }
  };
  visit(value, "", 0);
  if (issues.length > 0) throw invalidInput(`invalid ${what}`, issues);
}

/** Levels of arrays and objects an input may nest: every route's needs two or three. */
export const INPUT_DEPTH_MAX = 32;

const NUL_MESSAGE = "must not contain NUL (\\u0000)";
// In a `u` regex a surrogate pair is one code point, so only a lone half matches.
const LONE_SURROGATE = /\p{Cs}/u;

function unstorable(text: string): string | undefined {
  if (text.includes("\u0000")) return NUL_MESSAGE;
  if (LONE_SURROGATE.test(text))
    return "must be well-formed Unicode: a lone surrogate (\\ud800 to \\udfff) is not a character";
  return undefined;
}

/**
 * One FieldIssue per bad field. Given the `input` that was parsed, a field it lacks
 * is said to be required: a schema's own message for a wrong type (e.g. "must be a
 * job failure id") wins over the parse's "is required", and told a caller who sent
 * `{}` that their missing field had the wrong form. A schema that says "is required"
 * its own way (with an example) keeps its words.
 */
export function toFieldIssues(error: z.ZodError, input?: unknown): FieldIssue[] {
  return error.issues.flatMap((issue) => {
    const path = issue.path.map(String).join(".");
    if (
      issue.code === "invalid_type" &&
      input !== undefined &&
      !issue.message.startsWith("is required") &&
      isMissing(input, issue.path)
    ) {
      return [{ path, message: "is required" }];
    }
    // A strict object reports all unknown keys in one issue; name each of them.
    if (issue.code === "unrecognized_keys") {
      return issue.keys.map((key) => ({
        path: path ? `${path}.${key}` : key,
        message: "is not a known field",
      }));
    }
    return [{ path, message: issue.message }];
  });
}

function describe(target: keyof ValidationTargets): string {
  return target === "json" ? "body" : target === "param" ? "path" : target;
}

/** Whether `input` has no value at `path` (an absent key, not a null). */
function isMissing(input: unknown, path: readonly PropertyKey[]): boolean {
  let at: unknown = input;
  for (const key of path) {
    if (at === null || typeof at !== "object" || !Object.hasOwn(at, key)) return true;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at === undefined;
}
