import { Hono } from "hono";
import { requestId } from "hono/request-id";
import { validateBindings } from "./config.ts";
import { database, type OpenDatabase } from "./database.ts";
import type { HonoEnv } from "./env.ts";
import { handleError, handleNotFound } from "./errors.ts";
import { preferWait } from "./prefer.ts";
import { registerAdmin } from "./routes/admin.ts";
import { registerDashboard } from "./dashboard/index.ts";
import { registerEventsGet } from "./routes/events_get.ts";
import { registerJobsDeliver } from "./routes/jobs_deliver.ts";
import { registerJobsFailed } from "./routes/jobs_failed.ts";
import { registerHealthz } from "./routes/healthz.ts";
import { registerNotesCreate } from "./routes/notes_create.ts";
import { registerNotesDelete } from "./routes/notes_delete.ts";
import { registerNotesGet } from "./routes/notes_get.ts";
import { registerNotesImport } from "./routes/notes_import.ts";
import { registerNotesSearch } from "./routes/notes_search.ts";
import { registerNotesUpdate } from "./routes/notes_update.ts";
import { registerSuppliersActivate } from "./routes/suppliers_activate.ts";
import { registerSuppliersConnect } from "./routes/suppliers_connect.ts";
import { registerSuppliersCreate } from "./routes/suppliers_create.ts";
import { registerSuppliersGet } from "./routes/suppliers_get.ts";

export type App = Hono<HonoEnv>;

export interface AppOptions {
  /** How a request gets its database; the Neon WebSocket Pool unless a test says otherwise. */
  openDatabase?: OpenDatabase;
}

export function createApp(options: AppOptions = {}): App {
  const app: App = new Hono<HonoEnv>();
  // Order matters: every answer, including a misconfiguration, carries a request id.
  app.use(requestId());
  app.use(validateBindings);
  app.use(database(options.openDatabase));
  app.use(preferWait);

  registerHealthz(app);
  // Literal paths before `/notes/:id`, which would otherwise take "search" as an id.
  registerNotesSearch(app);
  registerNotesImport(app);
  registerNotesCreate(app);
  registerNotesGet(app);
  registerNotesUpdate(app);
  registerNotesDelete(app);
  registerSuppliersCreate(app);
  registerSuppliersGet(app);
  registerSuppliersConnect(app);
  registerSuppliersActivate(app);
  registerEventsGet(app);
  // The failure callback before `/jobs/:subscription`, which would take "_failed" as a name.
  registerJobsFailed(app);
  registerJobsDeliver(app);
  registerAdmin(app);
  registerDashboard(app);

  app.notFound(handleNotFound);
  app.onError(handleError);
  return app;
}
