import { and, desc, eq, isNull, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { webhookEndpoints } from "../schema.ts";
import { cursorAt, keysetPage, olderThan } from "./keyset.ts";
import { assertCursorOf, endpointView, listTag, type Cursor, type EndpointView } from "./schemas.ts";

export interface ListEndpointsOptions {
  /** undefined: every scope; null: only the unscoped endpoints. */
  scope?: string | null;
  /** Only the endpoints at this URL, as stored. */
  url?: string;
  limit: number;
  cursor?: Cursor;
}

/** Newest first, a keyset page at a time. */
export async function listEndpoints(
  db: Db,
  options: ListEndpointsOptions,
): Promise<{ endpoints: EndpointView[]; nextCursor: string | null }> {
  // The url joins the tag only when given, so cursors from before the filter still hold.
  const list =
    options.url === undefined
      ? listTag("endpoints", options.scope)
      : listTag("endpoints", options.scope, options.url);
  assertCursorOf(options.cursor, list);
  const t = webhookEndpoints;
  const where: SQL[] = [];
  if (options.scope === null) where.push(isNull(t.scope));
  else if (options.scope !== undefined) where.push(eq(t.scope, options.scope));
  if (options.url !== undefined) where.push(eq(t.url, options.url));
  if (options.cursor) where.push(olderThan(t.createdAt, t.id, options.cursor));
  const rows = await db
    .select({ row: t, at: cursorAt(t.createdAt) })
    .from(t)
    .where(and(...where))
    .orderBy(desc(t.createdAt), desc(t.id))
    .limit(options.limit + 1);
  const { items, nextCursor } = keysetPage(rows, options.limit, (row) => endpointView(row), list);
  return { endpoints: items, nextCursor };
}
