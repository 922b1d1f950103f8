import { sql } from "drizzle-orm";
import type { Db } from "./db.ts";
import { queryRows } from "./webhooks/rows.ts";

/** How much room the database takes, and where: what `stats` and the overview say. */
export interface Storage {
  /** The whole database on disk (pg_database_size): what a Neon plan's storage limit counts. */
  bytes: number;
  /** The largest tables of this schema with their indexes and TOAST, largest first. */
  largest: { table: string; bytes: number }[];
}

/** Tables named in `largest`. */
const LARGEST_SHOWN = 3;

/**
 * Reads the database's size and its largest tables. Nothing said how large the
 * database was or what filled it: a month's walkthrough grew it to 1.2 GB, most of it
 * webhook deliveries and idempotency keys, with no figure anywhere an operator looks.
 * Sizes come from the catalogue and the files' lengths, never a scan.
 */
export async function readStorage(db: Db): Promise<Storage> {
  const [row] = await queryRows<{ bytes: string; largest: { table: string; bytes: string }[] | null }>(
    db,
    sql`SELECT pg_database_size(current_database())::text AS bytes,
               (SELECT jsonb_agg(jsonb_build_object('table', t.relname, 'bytes', t.bytes::text) ORDER BY t.bytes DESC)
                  FROM (SELECT c.relname, pg_total_relation_size(c.oid) AS bytes
                          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
                         ORDER BY bytes DESC LIMIT ${LARGEST_SHOWN}) t) AS largest`,
  );
  return {
    bytes: Number(row?.bytes ?? 0),
    largest: (row?.largest ?? []).map((t) => ({ table: t.table, bytes: Number(t.bytes) })),
  };
}

/** "1.2 GB", "388 MB", "8.1 kB": decimal units, as Neon's console gives storage. */
export function bytesText(bytes: number): string {
  const units = ["bytes", "kB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  const shown = unit === 0 || value >= 100 ? Math.round(value).toString() : value.toFixed(1);
  return `${shown} ${units[unit]}`;
}

/** "1.2 GB; the largest tables: webhook_deliveries 388 MB, events 256 MB, idempotency_keys 167 MB". */
export function storageText(s: Storage): string {
  const largest = s.largest.map((t) => `${t.table} ${bytesText(t.bytes)}`).join(", ");
  return `${bytesText(s.bytes)}${largest ? `; the largest tables: ${largest}` : ""}`;
}
