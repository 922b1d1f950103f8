import { sql } from "drizzle-orm";
import type { App } from "../new-app.ts";
import { ApiError, databaseMisconfigured, databaseUnavailable, loggable } from "../errors.ts";

/**
 * 200 when the database answers a query; 503 with the reason in a few words when it
 * does not (the words databaseUnavailable uses for any route's 503), or 500 when it
 * turned the Worker away for its settings (a wrong password: no retry helps, so no
 * Retry-After; the words name the setting, not its value). Anyone may ask,
 * so the driver's own message, which can name the database role or carry the SQL
 * Drizzle ran, goes only to the log.
 */
export function registerHealthz(app: App) {
  app.get("/healthz", async (c) => {
    const started = Date.now();
    try {
      await c.var.db.execute(sql`SELECT 1`);
    } catch (error) {
      console.error(`[${c.get("requestId")}] /healthz:`, loggable(error));
      const misconfigured = databaseMisconfigured(error);
      if (misconfigured) throw new ApiError("MISCONFIGURED", `database misconfigured: ${misconfigured}`);
      const why = databaseUnavailable(error) ?? "its query failed; the request id identifies it in the logs";
      throw new ApiError("SERVICE_UNAVAILABLE", `database unavailable: ${why}`);
    }
    return c.json({ status: "ok", database: { ok: true, latencyMs: Date.now() - started } });
  });
}
