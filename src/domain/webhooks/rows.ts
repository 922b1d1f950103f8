import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";

/**
 * Runs one statement and answers its rows typed where they are read. Both
 * node-postgres and the Neon Pool answer execute() with a pg QueryResult.
 */
export async function queryRows<Row>(db: Db, query: SQL): Promise<Row[]> {
  return ((await db.execute(query)) as unknown as { rows: Row[] }).rows;
}

/**
 * Uuids as a Postgres array literal, one parameter for `$n::uuid[]` however many
 * there are. Each is a uuid already (from a row or a validated id), so none needs
 * quoting; the cast refuses anything else.
 */
export function uuidArray(ids: readonly string[]): string {
  return `{${ids.join(",")}}`;
}

/** Any strings as a Postgres array literal for `$n::text[]`, each quoted, so no value can break out. */
export function textArray(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`).join(",")}}`;
}

/** A timestamptz as an alert's message says it to a person: `2026-12-06 08:01:12 UTC`. */
export function utcText(at: SQL): SQL {
  return sql`to_char(${at} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')`;
}

/**
 * A timestamptz as the API writes times everywhere else (`2026-12-06T05:50:03.225Z`),
 * for a time put into jsonb, where Postgres would write `…05:50:03.225747+00:00`.
 * Truncated to the millisecond, never rounded up: a time compared against the
 * row it came from (firstFailedAt ≤ failed_at) must not pass it.
 */
export function isoTime(at: SQL): SQL {
  return sql`to_char(date_trunc('milliseconds', ${at}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}
