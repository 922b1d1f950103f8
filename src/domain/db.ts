import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";

/**
 * What every use case takes: a Drizzle database or a transaction on it, over
 * node-postgres (Node, tests) or the Neon WebSocket Pool (Workers). Use cases
 * that write open their own transaction on it; given a transaction, theirs
 * becomes a savepoint inside the caller's, so the caller decides what commits.
 */
export type Db = PgDatabase<PgQueryResultHKT>;
