import type { Context, ValidationTargets } from "hono";
import { validator } from "hono/validator";
import type { z } from "zod";
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
  return validator(target, (value) => parseOrThrow(target, schema, value));
}

/** `valid` for a schema that depends on the bindings (e.g. what URLs a deployment accepts). */
export function validFor<Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schemaFor: (config: Config) => Schema,
) {
  return validator(target, (value, c: Context<HonoEnv>) =>
    parseOrThrow(target, schemaFor(c.var.config), value),
  );
}

async function parseOrThrow<Schema extends z.ZodType>(
  target: keyof ValidationTargets,
  schema: Schema,
  value: unknown,
): Promise<z.output<Schema>> {
  const result = await schema.safeParseAsync(value, {
    error: (issue) => (issue.input === undefined ? "is required" : undefined),
  });
  if (result.success) return result.data as z.output<Schema>;
  const issues = toFieldIssues(result.error);
  const listed = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join("; ");
  throw new ApiError("BAD_REQUEST", `invalid ${describe(target)}: ${listed}`, issues);
}

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
