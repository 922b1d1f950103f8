import { sql } from "drizzle-orm";
import journal from "../../../drizzle/meta/_journal.json";
import type { App } from "../new-app.ts";
import type { Db } from "../../domain/db.ts";
import { queryRows } from "../../domain/webhooks/rows.ts";
import {
  ApiError,
  databaseMisconfiguration,
  databaseMisconfigured,
  databaseUnavailable,
  loggable,
  logOnce,
} from "../errors.ts";

/**
 * The migrations this Worker was built with, newest last, as drizzle's migrator
 * records them: `created_at` in `drizzle.__drizzle_migrations` is the journal's
 * `when`, and the migrator applies whatever is newer than its newest row.
 */
const MIGRATIONS: readonly { tag: string; when: number }[] = journal.entries;
const NEWEST = MIGRATIONS[MIGRATIONS.length - 1]!;

/**
 * How the database's schema stands against this Worker's: `current`, or `newer` when
 * migrate ran ahead of the deploy (the order Upgrading asks for; migrations add, so
 * this Worker still runs), or `unchecked` when the role may not read drizzle's table.
 * Older is not a value: it is the 500 below.
 */
type SchemaState = "current" | "newer" | "unchecked";

/**
 * 200 when the database answers and its schema is not older than this Worker's; 503
 * with the reason in a few words when it does not answer (the words
 * databaseUnavailable uses for any route's 503), or 500 when it turned the Worker
 * away for its settings (a wrong password: no retry helps, so no Retry-After; the
 * words name the setting, not its value) or was never migrated or not since the
 * Worker was deployed: `SELECT 1` answered 200 there while every other route was a
 * 500, so a readiness probe passed a deploy-before-migrate (the deploy walkthrough).
 * One query, the round trip `SELECT 1` was (two for a role that may not read
 * drizzle's table: then whether it may use the outbox's). Anyone may ask, so the driver's own
 * message, which can name the database role or carry the SQL Drizzle ran, and the
 * migration names go only to the log (ADR 0043).
 */
export function registerHealthz(app: App) {
  app.get("/healthz", async (c) => {
    const started = Date.now();
    let schema: SchemaState | "older";
    try {
      schema = await schemaState(c.var.db);
    } catch (error) {
      console.error(`[${c.get("requestId")}] /healthz:`, loggable(error));
      const misconfigured = databaseMisconfigured(error);
      if (misconfigured) throw new ApiError("MISCONFIGURED", `database misconfigured: ${misconfigured}`);
      const why = databaseUnavailable(error) ?? "its query failed; the request id identifies it in the logs";
      throw new ApiError("SERVICE_UNAVAILABLE", `database unavailable: ${why}`);
    }
    if (schema === "older")
      throw new ApiError(
        "MISCONFIGURED",
        "database misconfigured: its schema is older than this Worker's: run migrate",
      );
    return c.json({ status: "ok", database: { ok: true, latencyMs: Date.now() - started, schema } });
  });
}

/**
 * Whether the role may do to the outbox's tables what every request and the relay
 * do (each privilege asked alone: has_table_privilege is true if any of a list is
 * held). A table that is not there fails the query as a schema never migrated.
 */
async function mayUseTables(db: Db): Promise<boolean> {
  const [row] = await queryRows<{ usable: boolean }>(
    db,
    sql`SELECT has_table_privilege('public.events', 'SELECT') AND has_table_privilege('public.events', 'INSERT')
               AND has_table_privilege('public.events', 'UPDATE') AND has_table_privilege('public.events', 'DELETE')
               AND has_table_privilege('public.api_keys', 'SELECT') AS usable`,
  );
  return row?.usable === true;
}

async function schemaState(db: Db): Promise<SchemaState | "older"> {
  let newest: number | null;
  try {
    const [row] = await queryRows<{ newest: number | null }>(
      db,
      sql`SELECT max(created_at)::float8 AS newest FROM drizzle.__drizzle_migrations`,
    );
    newest = row?.newest ?? null;
  } catch (error) {
    // A role kept to the application's tables may not read drizzle's: the schema goes
    // unchecked. A role that may use no table at all answered 200 here while every
    // other route was a 500 (the config walkthrough): its refusal is this answer.
    if (databaseMisconfiguration(error) === "privileges" && (await mayUseTables(db))) return "unchecked";
    throw error;
  }
  if (newest !== null && newest > NEWEST.when) return "newer";
  if (newest === NEWEST.when) return "current";
  const had =
    newest === null ? "none" : (MIGRATIONS.find((m) => m.when === newest)?.tag ?? `one made at ${newest}`);
  // Once per isolate: a readiness probe asks every few seconds.
  logOnce(`/healthz: the database's newest migration is ${had}, this Worker's ${NEWEST.tag}: run migrate`);
  return "older";
}
