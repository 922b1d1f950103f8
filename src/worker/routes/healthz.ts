import { sql } from "drizzle-orm";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";

/** 200 when the database answers a query; 503 with the reason when it does not. */
export function registerHealthz(app: App) {
  app.get("/healthz", async (c) => {
    const started = Date.now();
    try {
      await c.var.db.execute(sql`SELECT 1`);
    } catch (error) {
      throw new ApiError("SERVICE_UNAVAILABLE", `database unavailable: ${reason(error)}`);
    }
    return c.json({ status: "ok", database: { ok: true, latencyMs: Date.now() - started } });
  });
}

// Drizzle wraps driver errors in "Failed query: …"; the driver's own message is the reason.
function reason(error: unknown): string {
  let e = error;
  while (e instanceof Error && e.cause instanceof Error) e = e.cause;
  return e instanceof Error && e.message ? e.message : String(e);
}
