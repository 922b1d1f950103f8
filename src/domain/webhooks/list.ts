import { and, desc, eq, isNull, sql, type AnyColumn, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { webhookEndpoints } from "../schema.ts";
import { encodeCursor, endpointView, type Cursor, type EndpointView } from "./schemas.ts";

export interface ListEndpointsOptions {
  /** undefined: every scope; null: only the unscoped endpoints. */
  scope?: string | null;
  limit: number;
  cursor?: Cursor;
}

/** Newest first, a keyset page at a time. */
export async function listEndpoints(
  db: Db,
  options: ListEndpointsOptions,
): Promise<{ endpoints: EndpointView[]; nextCursor: string | null }> {
  const t = webhookEndpoints;
  const where: SQL[] = [];
  if (options.scope === null) where.push(isNull(t.scope));
  else if (options.scope !== undefined) where.push(eq(t.scope, options.scope));
  if (options.cursor) {
    where.push(
      sql`(${t.createdAt}, ${t.id}) < (${options.cursor.at}::timestamptz, ${options.cursor.id}::uuid)`,
    );
  }
  const rows = await db
    .select({ row: t, at: cursorAt(t.createdAt) })
    .from(t)
    .where(and(...where))
    .orderBy(desc(t.createdAt), desc(t.id))
    .limit(options.limit + 1);
  const page = rows.slice(0, options.limit);
  const last = page.at(-1);
  return {
    endpoints: page.map((r) => endpointView(r.row)),
    nextCursor: rows.length > options.limit && last ? encodeCursor({ at: last.at, id: last.row.id }) : null,
  };
}

/** created_at in UTC to the microsecond, the precision the keyset comparison needs. */
export function cursorAt(column: AnyColumn) {
  return sql<string>`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}
