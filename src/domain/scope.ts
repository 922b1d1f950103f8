import { eq, isNull, type SQL } from "drizzle-orm";
import type { PgColumn } from "drizzle-orm/pg-core";

/**
 * The scope a caller acts in (a tenant API key's). Use cases that read or change
 * an entity by id take it, so another scope's id is "not found". Absent, the use
 * case is unscoped: operator tools and tests.
 */
export interface Within {
  scope: string | null;
}

/**
 * The rows of `within`'s scope: null matches only null, as a key's null scope must.
 * Said as `= scope` or `IS NULL`, which an index on the column serves; `IS NOT
 * DISTINCT FROM` means the same, but no index takes it, and a tenant's search read
 * every tenant's matching rows to keep its own (3,000 read for 2 kept).
 */
export function inScope(column: PgColumn, within: Within | undefined): SQL | undefined {
  if (!within) return undefined;
  return within.scope === null ? isNull(column) : eq(column, within.scope);
}
