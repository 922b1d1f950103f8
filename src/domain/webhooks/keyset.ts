import { sql, type AnyColumn, type SQL } from "drizzle-orm";
import { encodeCursor, type Cursor } from "./schemas.ts";

// Newest-first keyset pages over (created_at, id), the order every webhook list
// uses: never OFFSET, so a page deep in a busy history costs what the first does.

/** created_at in UTC to the microsecond, the precision the keyset comparison needs. */
export function cursorAt(column: AnyColumn) {
  return sql<string>`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/** The rows after `cursor` in newest-first order. */
export function olderThan(createdAt: AnyColumn, id: AnyColumn, cursor: Cursor): SQL {
  return sql`(${createdAt}, ${id}) < (${cursor.at}::timestamptz, ${cursor.id}::uuid)`;
}

/**
 * One page from `limit + 1` rows fetched in newest-first order: the extra row only
 * says whether a next page exists.
 */
export function keysetPage<Row extends { id: string }, View>(
  rows: { row: Row; at: string }[],
  limit: number,
  view: (row: Row) => View,
  /** The list's tag (listTag), which the next page's cursor carries. */
  list: string,
): { items: View[]; nextCursor: string | null } {
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return {
    items: page.map((r) => view(r.row)),
    nextCursor: rows.length > limit && last ? encodeCursor({ at: last.at, id: last.row.id, list }) : null,
  };
}
