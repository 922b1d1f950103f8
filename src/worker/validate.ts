import type { Context, MiddlewareHandler, ValidationTargets } from "hono";
import { validator } from "hono/validator";
import { z } from "zod";
import type { Config, HonoEnv } from "./env.ts";
import { ApiError, type FieldIssue } from "./errors.ts";

/**
 * Hono's validator with a zod schema: valid input reaches the handler typed, and
 * invalid input answers 400 with one issue per bad field, named by its path.
 */
export function valid<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schema: Schema,
) {
  return validator(target, (value, c: Context<HonoEnv>) => parseOrThrow(c, target, schema, value));
}

/**
 * For actions that take no body (activate, connect, rotate-secret, test,
 * redeliver): none, or `{}`. A field is refused as every route refuses one it does
 * not know, so a caller who thought the action took options hears it does not
 * before it runs, not after.
 */
export const noBody: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if ((await c.req.text()).trim() === "") return next();
  return valid("json", z.strictObject({}))(c, next);
};

/** `valid` for a schema that depends on the bindings (e.g. what URLs a deployment accepts). */
export function validFor<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schemaFor: (config: Config) => Schema,
) {
  return validator(target, (value, c: Context<HonoEnv>) =>
    parseOrThrow(c, target, schemaFor(c.var.config), value),
  );
}

async function parseOrThrow<Schema extends z.ZodType>(
  c: Context<HonoEnv>,
  target: keyof ValidationTargets,
  schema: Schema,
  value: unknown,
): Promise<z.output<Schema>> {
  if (target === "json" || target === "form") requireMediaType(c.req.header("content-type"), target);
  refuseNul(value, describe(target));
  const result = await schema.safeParseAsync(value, {
    error: (issue) => (issue.input === undefined ? "is required" : undefined),
  });
  if (result.success) return result.data as z.output<Schema>;
  const issues = toFieldIssues(result.error);
  const listed = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join("; ");
  throw new ApiError("BAD_REQUEST", `invalid ${describe(target)}: ${listed}`, issues);
}

const JSON_TYPE = /^application\/([\w.-]+\+)?json$/;
const FORM_TYPES = ["application/x-www-form-urlencoded", "multipart/form-data"];

/**
 * Hono's validator reads a body only when its Content-Type matches and otherwise
 * validates `{}`: a JSON body sent as text/plain came back as "title: is required".
 * The honest answer is 415, naming what to send.
 */
function requireMediaType(header: string | undefined, target: "json" | "form"): void {
  const type = (header ?? "").split(";")[0]!.trim().toLowerCase();
  const ok = target === "json" ? JSON_TYPE.test(type) : FORM_TYPES.includes(type);
  if (ok) return;
  const want = target === "json" ? "application/json" : FORM_TYPES.join(" or ");
  throw new ApiError(
    "UNSUPPORTED_MEDIA_TYPE",
    `the body must be sent as ${want}, got ${type ? `"${type}"` : "no Content-Type"}`,
  );
}

/**
 * Postgres text cannot hold U+0000: a NUL that reached a query failed it with
 * "invalid byte sequence", a 500. Every string a caller sends (values and keys,
 * at any depth, in a body, query or form) passes here before any schema or SQL
 * sees it, so no route can forget the check. Each offending field is named.
 */
export function refuseNul(value: unknown, what: string): void {
  const issues: FieldIssue[] = [];
  const visit = (v: unknown, path: string) => {
    if (typeof v === "string") {
      if (v.includes("\u0000")) issues.push({ path, message: NUL_MESSAGE });
    } else if (Array.isArray(v)) {
      v.forEach((item, i) => visit(item, path ? `${path}.${i}` : String(i)));
    } else if (v !== null && typeof v === "object") {
      for (const [key, item] of Object.entries(v)) {
        const at = path ? `${path}.${key}` : key;
        if (key.includes("\u0000")) issues.push({ path: at, message: NUL_MESSAGE });
        else visit(item, at);
      }
    }
  };
  visit(value, "");
  if (issues.length > 0) {
    const listed = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join("; ");
    throw new ApiError("BAD_REQUEST", `invalid ${what}: ${listed}`, issues);
  }
}

const NUL_MESSAGE = "must not contain NUL (\\u0000)";

export function toFieldIssues(error: z.ZodError): FieldIssue[] {
  return error.issues.flatMap((issue) => {
    const path = issue.path.map(String).join(".");
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
