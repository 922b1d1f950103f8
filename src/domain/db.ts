import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";

/**
 * What every use case takes: a Drizzle database or a transaction on it, over
 * node-postgres (Node, tests) or the Neon WebSocket Pool (Workers). Use cases
 * that write open their own transaction on it; given a transaction, theirs
 * becomes a savepoint inside the caller's, so the caller decides what commits.
 */
export type Db = PgDatabase<PgQueryResultHKT>;

/**
 * A timestamp from a raw result as a Date: node-postgres and the Neon driver parse
 * timestamptz, but a value read some other way (a multi-statement message's text) may
 * be its text.
 */
export function asDate(value: unknown): Date {
  return value instanceof Date ? value : new Date(value as string);
}
