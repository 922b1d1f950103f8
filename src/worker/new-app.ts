import { Hono, type Context } from "hono";
import { requestId } from "hono/request-id";
import { limitBodies } from "./body-limit.ts";
import { validateBindings } from "./config.ts";
import { database, type OpenDatabase } from "./database.ts";
import type { HonoEnv } from "./env.ts";
import type { DashboardEnv } from "./dashboard/env.ts";
import { dashboardError } from "./dashboard/errors.tsx";
import { ApiError, asError, handleError, handleNotFound } from "./errors.ts";
import { preferWait } from "./prefer.ts";
import { requireSignatureHeader } from "./signature.ts";
import { noQueryOnWrites, tenantAuth } from "./tenant-auth.ts";

export interface AppOptions {
  /** How a request gets its database; the Neon WebSocket Pool unless a test says otherwise. */
  openDatabase?: OpenDatabase;
}

/**
 * The app with its middleware and error handling but no routes. Routes take its
 * type from here, never from app.ts, which imports them all (no import cycle).
 */
export function newApp(options: AppOptions = {}) {
  const app = new Hono<HonoEnv>();
  // Order matters: every answer, including a misconfiguration, carries a request id.
  // A caller's own id is kept only when short and plain (letters, digits, -, _, =):
  // it is echoed in headers and written to logs.
  app.use(requestId({ limitLength: 64 }));
  // No answer of the API may be kept by a cache between it and its caller: some carry
  // a secret shown once (a new API key, an endpoint's signing secret), and the rest
  // (a receipt, a poll) are stale a moment later. The dashboard sets its own.
  // And none is read as anything but its declared type: a 404's JSON repeats the
  // path it was asked for, which a browser sniffing it as HTML would run.
  app.use(async (c, next) => {
    await next();
    if (!c.res.headers.has("Cache-Control")) c.res.headers.set("Cache-Control", "no-store");
    c.res.headers.set("X-Content-Type-Options", "nosniff");
  });
  // Whatever a handler throws reaches onError as an Error (asError: the Neon driver's
  // WebSocket rejects with an ErrorEvent, which Hono would let escape as workerd's 500).
  app.use(async (_c, next) => {
    try {
      await next();
    } catch (thrown) {
      throw asError(thrown);
    }
  });
  app.use(validateBindings);
  // Someone who opens the Worker's own address in a browser is sent to the dashboard,
  // not shown the API's 401 for a missing key (a new user's first look); an API client,
  // whose Accept does not ask for HTML, still gets that answer.
  app.use(async (c, next) => {
    if (c.req.path === "/" && c.req.method === "GET" && /\btext\/html\b/i.test(c.req.header("accept") ?? ""))
      return c.redirect("/dashboard", 302);
    await next();
  });
  // Unsigned job requests are refused before their body is read; every body is capped before it is parsed.
  app.use("/jobs/*", requireSignatureHeader);
  app.use(limitBodies);
  app.use(database(options.openDatabase));
  // Before Prefer: an unauthenticated write learns nothing, not even that its Prefer was malformed.
  app.use(tenantAuth);
  app.use(noQueryOnWrites);
  app.use(preferWait);
  // A page that does not exist under /dashboard is a page saying so, as its other errors are.
  app.notFound((c) =>
    c.req.path === "/dashboard" || c.req.path.startsWith("/dashboard/")
      ? dashboardError(
          // Not the path: a link must not put words on an operator's page (ADR 0009).
          new ApiError("NOT_FOUND", "no such page in the dashboard"),
          c as unknown as Context<DashboardEnv>,
        )
      : handleNotFound(c, app.routes),
  );
  app.onError(handleError);
  return app;
}

export type App = ReturnType<typeof newApp>;
