import type { Context } from "hono";
import type { ZodError } from "zod";
import { invalidInput, refuseUnstorable, toFieldIssues } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";

/**
 * A webhook endpoint form (add or edit), read by hand rather than by valid(): its
 * refusal shows the form again with what was typed. So it is checked here as valid()
 * checks every other input (a NUL in a URL was saved, percent-encoded), the globs
 * are split from their one line, and a textarea's CRLF, as browsers send it, is the
 * API's LF.
 */
export async function readEndpointForm(c: Context<DashboardEnv>) {
  const form = await c.req.parseBody();
  refuseUnstorable(form, "form");
  const text = (name: string) => (typeof form[name] === "string" ? form[name] : undefined);
  const types = text("types");
  return {
    text,
    /** The globs as typed, for the form shown again. */
    types,
    globs: types === undefined ? undefined : types.split(/[\s,]+/).filter(Boolean),
    description: text("description")?.replace(/\r\n?/g, "\n"),
  };
}

/**
 * Why an endpoint form was refused, as its page says it: each field named, a glob's
 * "types.3" as the one line of globs the reader typed (counted from zero in a list
 * they never saw), and the API's backticks as quotes.
 */
export function endpointFormRefusal(what: string, error: ZodError, input: object): string {
  const issues = toFieldIssues(error, input).map((issue) => ({
    ...issue,
    path: issue.path.replace(/^types\.\d+$/, "types"),
  }));
  return invalidInput(what, issues).message.replace(/`([^`]*)`/g, "“$1”");
}
