import { Hono } from "hono";
import { requestId } from "hono/request-id";
import { validateBindings } from "./config.ts";
import { database, type OpenDatabase } from "./database.ts";
import type { HonoEnv } from "./env.ts";
import { handleError, handleNotFound } from "./errors.ts";
import { preferWait } from "./prefer.ts";

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
  app.use(requestId());
  app.use(validateBindings);
  app.use(database(options.openDatabase));
  app.use(preferWait);
  app.notFound(handleNotFound);
  app.onError(handleError);
  return app;
}

export type App = ReturnType<typeof newApp>;
