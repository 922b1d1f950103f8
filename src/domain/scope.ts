import { sql, type SQL } from "drizzle-orm";
import type { PgColumn } from "drizzle-orm/pg-core";

/**
 * The scope a caller acts in (a tenant API key's). Use cases that read or change
 * an entity by id take it, so another scope's id is "not found". Absent, the use
 * case is unscoped: operator tools and tests.
 */
export interface Within {
  scope: string | null;
}

/** `column IS NOT DISTINCT FROM scope`: null matches only null, as a key's null scope must. */
export function inScope(column: PgColumn, within: Within | undefined): SQL | undefined {
  return within ? sql`${column} IS NOT DISTINCT FROM ${within.scope}` : undefined;
}
