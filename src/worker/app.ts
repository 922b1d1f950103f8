import { newApp, type App, type AppOptions } from "./new-app.ts";
import { registerAdmin } from "./routes/admin.ts";
import { registerAdminApiKeys } from "./routes/admin-api-keys.ts";
import { registerAdminWebhooksActions } from "./routes/admin-webhooks-actions.ts";
import { registerDashboard } from "./dashboard/index.ts";
import { registerEventsGet } from "./routes/events-get.ts";
import { registerJobsCanary } from "./routes/jobs-canary.ts";
import { registerJobsDeliver } from "./routes/jobs-deliver.ts";
import { registerJobsFailed } from "./routes/jobs-failed.ts";
import { registerJobsWebhookDeliver } from "./routes/jobs-webhook-deliver.ts";
import { registerHealthz } from "./routes/healthz.ts";
import { registerNotesCreate } from "./routes/notes-create.ts";
import { registerNotesDelete } from "./routes/notes-delete.ts";
import { registerNotesGet } from "./routes/notes-get.ts";
import { registerNotesImport } from "./routes/notes-import.ts";
import { registerNotesSearch } from "./routes/notes-search.ts";
import { registerNotesUpdate } from "./routes/notes-update.ts";
import { registerSuppliersActivate } from "./routes/suppliers-activate.ts";
import { registerSuppliersConnect } from "./routes/suppliers-connect.ts";
import { registerSuppliersCreate } from "./routes/suppliers-create.ts";
import { registerSuppliersGet } from "./routes/suppliers-get.ts";
import { registerWebhookDeliveries } from "./routes/webhook-deliveries.ts";
import { registerWebhookEndpoints } from "./routes/webhook-endpoints.ts";

/** The Worker's app: every route, registered on the app `newApp` builds. */
export function createApp(options: AppOptions = {}): App {
  const app = newApp(options);
  registerHealthz(app);
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
  // The failure callback, the canary and webhook.deliver before `/jobs/:subscription`,
  // which would take them as names.
  registerJobsFailed(app);
  registerJobsCanary(app);
  registerJobsWebhookDeliver(app);
  registerJobsDeliver(app);
  registerAdmin(app);
  // After registerAdmin: its `/admin/*` bearer check must run before these.
  registerWebhookEndpoints(app);
  registerWebhookDeliveries(app);
  registerAdminApiKeys(app);
  registerAdminWebhooksActions(app);
  registerDashboard(app);
  return app;
}
