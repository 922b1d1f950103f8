import { Hono } from "hono";
import type { HonoEnv } from "../env.ts";
import type { DashboardEnv } from "./env.ts";
import { dashboardError } from "./errors.tsx";
import { registerLogin } from "./login.tsx";
import { registerAlerts } from "./pages/alerts.tsx";
import { registerEventDetail } from "./pages/event-detail.tsx";
import { registerEvents } from "./pages/events.tsx";
import { registerJobFailures } from "./pages/job-failures.tsx";
import { registerOverview } from "./pages/overview.tsx";
import { registerPoisoned } from "./pages/poisoned.tsx";
import { registerWebhookDeliveries } from "./pages/webhook-deliveries.tsx";
import { registerWebhooks } from "./pages/webhooks.tsx";
import { dashboardHeaders, noStore, sameOriginForms } from "./security.ts";
import { requireSession } from "./session.ts";
import { DASHBOARD_CSS, DASHBOARD_ICON } from "./styles.ts";

/**
 * The operator dashboard, mounted at /dashboard. Order is the security model:
 * headers on everything; the stylesheet and icon are public (the login page needs them);
 * from there on nothing is cached and cross-site form posts are refused; the
 * login routes are open; everything after them needs a session.
 */
export function dashboardApp(): Hono<DashboardEnv> {
  const dashboard = new Hono<DashboardEnv>();
  dashboard.use(dashboardHeaders);
  dashboard.get("/assets/dashboard.css", (c) => {
    c.header("Cache-Control", "public, max-age=300");
    return c.body(DASHBOARD_CSS, 200, { "Content-Type": "text/css; charset=utf-8" });
  });
  dashboard.get("/assets/icon.svg", (c) => {
    c.header("Cache-Control", "public, max-age=86400");
    return c.body(DASHBOARD_ICON, 200, { "Content-Type": "image/svg+xml" });
  });
  dashboard.use(noStore, sameOriginForms);
  registerLogin(dashboard);
  dashboard.use(requireSession);
  registerOverview(dashboard);
  registerEvents(dashboard);
  registerEventDetail(dashboard);
  registerPoisoned(dashboard);
  registerAlerts(dashboard);
  registerJobFailures(dashboard);
  registerWebhooks(dashboard);
  registerWebhookDeliveries(dashboard);
  dashboard.onError(dashboardError);
  return dashboard;
}

export function registerDashboard(app: Hono<HonoEnv>) {
  // A trailing slash is another path (README), and the API's answer to one is 404;
  // the dashboard's own address typed with one is the dashboard, for a person.
  app.get("/dashboard/", (c) => c.redirect("/dashboard", 308));
  app.route("/dashboard", dashboardApp());
}
