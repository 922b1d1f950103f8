import { DrizzleQueryError } from "drizzle-orm";
/**
 * Whose fault a failure is decides what happens next (guarantee 5): an outage of
 * the transport or the database never counts against a row; only an error that
 * belongs to one event increments its attempts and can poison it.
 */
export type FailureKind = "outage" | "rejected";

/** Thrown by publishers. `rejected` means the transport refused the request itself (4xx other than 408/429). */
export class PublishError extends Error {
  override readonly name = "PublishError";
  constructor(
    message: string,
    readonly kind: FailureKind,
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** An error that belongs to one event: a filter that threw, a job too large to send. */
export class EventError extends Error {
  override readonly name = "EventError";
}

/**
 * HTTP statuses that say "this request is wrong", as opposed to "try later".
 * 401/403/404 are configuration problems of the whole relay (token, URL), not of a row.
 */
export function kindOfStatus(status: number): FailureKind {
  if (status === 400 || status === 413 || status === 414 || status === 422) return "rejected";
  return "outage";
}

export function classifyPublishFailure(error: unknown): FailureKind {
  if (error instanceof PublishError) return error.kind;
  return "outage";
}

export function errorMessage(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  // last_error is stored in text/jsonb, which cannot hold NUL; keep it readable and bounded.
  return text.replaceAll("\u0000", "").slice(0, 2000);
}

/**
 * An error's message with its cause's, for a line a person reads: fetch's own
 * words are "fetch failed", and why (a refused port, a DNS name) is its cause's.
 */
export function withCause(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.cause instanceof Error ? `${error.message} (${error.cause.message})` : error.message;
}

/** An error's message with its SQLSTATE when it has one: `relation "x" does not exist (42P01)`. */
export function messageWithCode(error: Error): string {
  const code = (error as { code?: unknown }).code;
  return `${error.message}${typeof code === "string" ? ` (${code})` : ""}`;
}

/**
 * A failed Drizzle query in words a log line or a stored failure may carry: its
 * driver's reason (with the SQLSTATE) and the statement, never its parameters,
 * which hold what callers sent (note text, an API key's hash, an endpoint's sealed
 * secret). Drizzle's own message is the statement followed by the parameters.
 * Undefined for any other error. `asError` turns a cause that is not an Error (the
 * Neon driver's ErrorEvent in workerd) into one.
 */
export function queryFailureText(
  error: unknown,
  asError: (thrown: unknown) => Error = (thrown) =>
    thrown instanceof Error ? thrown : new Error(String(thrown)),
): string | undefined {
  if (!(error instanceof DrizzleQueryError)) return undefined;
  const why = error.cause === undefined ? "no reason given" : messageWithCode(asError(error.cause));
  // On one line: a statement written over several made the sweep's record and its
  // log line break mid-sentence (the CLI's `stats` printed its tail on a line of its own).
  return `query failed: ${why}; the statement, its parameters withheld: ${error.query.replace(/\s+/g, " ").trim()}`;
}

/**
 * Input an operator or caller got wrong (a malformed id, an unknown state): a 400, not a
 * fault. `field` names the input it is about, for the API's `issues`, as a schema's
 * refusal names it; the message then starts with `<field>: `.
 */
export class InvalidInputError extends Error {
  override readonly name = "InvalidInputError";
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/**
 * What is wrong with the deployment's database settings, read from a SQLSTATE: the
 * database turned us away for something no retry fixes. One home for the codes;
 * each caller (the Worker's answer, the CLI's line) says it in words for its reader.
 */
export type DatabaseMisconfiguration = "credentials" | "no_database" | "schema" | "privileges";

export function databaseMisconfigurationOf(sqlstate: unknown): DatabaseMisconfiguration | undefined {
  switch (sqlstate) {
    case "28P01": // invalid_password
    case "28000": // invalid_authorization_specification (no such role, pg_hba refusal)
      return "credentials";
    case "3D000": // invalid_catalog_name
      return "no_database";
    case "42P01": // undefined_table: deployed before `migrate`
    case "42703": // undefined_column: a schema older than the code
    case "42P10": // invalid_column_reference: ON CONFLICT names a unique index a skipped migration adds
    case "42704": // undefined_object: a type or index a skipped migration adds
    case "42883": // undefined_function: likewise, a function
      return "schema";
    case "42501": // insufficient_privilege
      return "privileges";
    default:
      return undefined;
  }
}
