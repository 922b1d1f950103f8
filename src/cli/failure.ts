import { DrizzleQueryError } from "drizzle-orm";
import { databaseMisconfigurationOf } from "../outbox/index.ts";

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ECONNRESET",
  "EAI_AGAIN",
]);

// pg's words for a connect that timed out: the pool's, and (pg 8.2x) the client's own.
const CONNECT_TIMEOUT =
  /timeout exceeded when trying to connect|connection terminated due to connection timeout/i;

// admin_shutdown, crash_shutdown, cannot_connect_now.
const SESSION_ENDED = new Set(["57P01", "57P02", "57P03"]);
const NOT_QUERYABLE = /not queryable/i;

/**
 * One line an operator can act on, instead of a stack trace. The reason may sit a few
 * causes deep: Drizzle wraps a driver's error as "Failed query: <the SQL> params: <the
 * values>", which said nothing an operator could act on (and printed the values), so
 * the driver's own error under it is what is read and told.
 */
export function describeFailure(error: unknown): string {
  if (error instanceof DescribedFailure) return error.message;
  const e = driverError(error);
  const code = e.code ?? e.errors?.[0]?.code;
  if (code && CONNECTION_CODES.has(code)) {
    return `cannot reach the database (${code}): check DATABASE_URL and that Postgres is running`;
  }
  switch (databaseMisconfigurationOf(code)) {
    case "credentials":
      return `the database refused the credentials in DATABASE_URL (${code})`;
    case "no_database":
      return `the database in DATABASE_URL does not exist (${e.message})`;
    case "schema":
      return `the outbox tables are missing or older than this code: run \`npm run outbox -- migrate\` (${e.message})`;
    case "privileges":
      return `the role in DATABASE_URL may not do this (${e.message})`;
    default:
      break;
  }
  // A session the server ended (an administrator's pg_terminate_backend, a restart),
  // or pg's client once its socket died: "Client has encountered a connection error
  // and is not queryable" told an operator nothing about what became of the work.
  if (SESSION_ENDED.has(code ?? "") || NOT_QUERYABLE.test(e.message ?? "")) {
    return `the connection to the database was lost (${e.message}): what the command had not committed was rolled back; run it again`;
  }
  if (CONNECT_TIMEOUT.test(e.message ?? "")) {
    return "cannot reach the database (timed out): check DATABASE_URL and that Postgres is running";
  }
  // Something answered at the address but closed the connection before speaking
  // Postgres: a DATABASE_URL with another service's port said only pg's own words.
  if (/^connection terminated unexpectedly$/i.test(e.message ?? "")) {
    return "the server at DATABASE_URL closed the connection before it answered as Postgres: check its host and port";
  }
  return e.message ?? String(error);
}

/** A failure a command has put in words already (its own, around describeFailure's): told as it is. */
export class DescribedFailure extends Error {
  override readonly name = "DescribedFailure";
}

interface DriverError {
  code?: string;
  message?: string;
  errors?: { code?: string }[];
}

/** The error that says why: the driver's, under Drizzle's wrapper when there is one. */
function driverError(error: unknown): DriverError {
  return (error instanceof DrizzleQueryError && error.cause ? error.cause : error) as DriverError;
}
