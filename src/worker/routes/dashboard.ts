import type { Context, MiddlewareHandler } from "hono";
import { basicAuth } from "hono/basic-auth";
import { csrf } from "hono/csrf";
import { html, raw } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import { z } from "zod";
import { listJobFailures } from "../../domain/job-failures/record.ts";
import { getEvent, listAlerts, listEvents, requeue, stats } from "../../outbox/index.ts";
import type { App } from "../new-app.ts";
import type { HonoEnv } from "../env.ts";
import { ApiError } from "../errors.ts";
import { valid } from "../validate.ts";
import { idParam } from "./params.ts";

/**
 * A page for people: the same facts as /admin/* (backlog, lag, poisoned rows with
 * their errors, an event's fan-out, failed jobs) and a requeue button. Browsers
 * cannot attach a bearer token to a page load, so it takes HTTP Basic (user
 * `admin`, password ADMIN_TOKEN), which they prompt for. Because a browser then
 * resends those credentials by itself, the requeue form is guarded against
 * cross-site posts by Hono's csrf middleware (Origin must be this site).
 */
const dashboardAuth: MiddlewareHandler<HonoEnv> = (c, next) =>
  basicAuth({ username: "admin", password: c.var.config.ADMIN_TOKEN, realm: "edge-outbox operators" })(
    c,
    next,
  );

const requeueForm = z.strictObject({ id: z.guid("must be an event id (a UUID)") });

export function registerDashboard(app: App) {
  app.use("/dashboard", dashboardAuth);
  app.use("/dashboard/*", dashboardAuth, csrf());

  app.get("/dashboard", async (c) => {
    const [s, poisoned, alerts, failures] = await Promise.all([
      stats(c.var.pool),
      listEvents(c.var.pool, { state: "poisoned", limit: 100 }),
      listAlerts(c.var.pool, { open: true, limit: 50 }),
      listJobFailures(c.var.db, { limit: 20 }),
    ]);
    // Only ids are echoed: a link must not be able to put words on this page.
    const requeued = z.guid().safeParse(c.req.query("requeued")).data;
    const unchanged = z.guid().safeParse(c.req.query("unchanged")).data;
    const notice = requeued ?? (unchanged ? `nothing: ${unchanged} is not poisoned` : undefined);
    return page(
      c,
      "edge-outbox",
      html`
        ${notice ? html`<p class="notice">Requeued ${notice}.</p>` : ""}
        <h2>Relay</h2>
        <table>
          <tr>
            <th>backlog</th>
            <td>${s.backlog} (${s.due} due now)</td>
          </tr>
          <tr>
            <th>oldest pending</th>
            <td>${s.oldestPendingAgeSeconds === null ? "-" : `${s.oldestPendingAgeSeconds.toFixed(1)} s`}</td>
          </tr>
          <tr>
            <th>poisoned</th>
            <td>${s.poisoned}</td>
          </tr>
          <tr>
            <th>open alerts</th>
            <td>${s.openAlerts}</td>
          </tr>
          <tr>
            <th>state</th>
            <td>
              ${s.relay.failures === 0 ? "healthy" : `backing off after ${s.relay.failures} failed passes until ${iso(s.relay.backoffUntil)}: ${s.relay.lastError ?? ""}`}
            </td>
          </tr>
        </table>
        <h2>Poisoned events</h2>
        ${
          poisoned.length === 0
            ? html`<p>None.</p>`
            : html`<table>
                <tr>
                  <th>event</th>
                  <th>type</th>
                  <th>attempts</th>
                  <th>last error</th>
                  <th></th>
                </tr>
                ${poisoned.map(
                  (e) =>
                    html`<tr>
                      <td><a href="/dashboard/events/${e.id}">${e.id}</a></td>
                      <td>${e.type}</td>
                      <td>${e.attempts}</td>
                      <td class="error">${e.lastError ?? ""}</td>
                      <td>
                        <form method="post" action="/dashboard/requeue">
                          <input type="hidden" name="id" value="${e.id}" /><button>Requeue</button>
                        </form>
                      </td>
                    </tr>`,
                )}
              </table>`
        }
        <h2>Open alerts</h2>
        ${
          alerts.length === 0
            ? html`<p>None.</p>`
            : html`<table>
                <tr>
                  <th>when</th>
                  <th>kind</th>
                  <th>message</th>
                </tr>
                ${alerts.map(
                  (a) =>
                    html`<tr>
                      <td>${iso(a.createdAt)}</td>
                      <td>${a.kind}</td>
                      <td>${a.message}</td>
                    </tr>`,
                )}
              </table>`
        }
        <h2>Jobs that exhausted their retries</h2>
        ${
          failures.length === 0
            ? html`<p>None.</p>`
            : html`<table>
                <tr>
                  <th>when</th>
                  <th>subscription</th>
                  <th>event</th>
                  <th>status</th>
                  <th>message</th>
                </tr>
                ${failures.map(
                  (f) =>
                    html`<tr>
                      <td>${iso(f.receivedAt)}</td>
                      <td>${f.subscription}</td>
                      <td>
                        ${f.eventId ? html`<a href="/dashboard/events/${f.eventId}">${f.eventId}</a>` : "-"}
                      </td>
                      <td>${f.status ?? "-"}</td>
                      <td>${f.messageId}</td>
                    </tr>`,
                )}
              </table>`
        }
      `,
    );
  });

  app.get("/dashboard/events/:id", idParam("event"), async (c) => {
    const id = c.req.valid("param").id;
    const event = await getEvent(c.var.pool, id);
    if (!event) throw new ApiError("NOT_FOUND", `event ${id} not found`);
    const fanout = Object.entries(event.fanout ?? {});
    return page(
      c,
      `event ${event.id}`,
      html`
        <p><a href="/dashboard">← dashboard</a></p>
        <table>
          <tr>
            <th>type</th>
            <td>${event.type}</td>
          </tr>
          <tr>
            <th>subject</th>
            <td>${event.subject}${event.scope ? ` (scope ${event.scope})` : ""}</td>
          </tr>
          <tr>
            <th>state</th>
            <td>${event.state}</td>
          </tr>
          <tr>
            <th>created</th>
            <td>${iso(event.createdAt)}</td>
          </tr>
          <tr>
            <th>fanned out</th>
            <td>${iso(event.fannedOutAt)}</td>
          </tr>
          <tr>
            <th>attempts</th>
            <td>${event.attempts}${event.nextAttemptAt ? `, next ${iso(event.nextAttemptAt)}` : ""}</td>
          </tr>
          <tr>
            <th>last error</th>
            <td class="error">${event.lastError ?? "-"}</td>
          </tr>
        </table>
        ${
          event.state === "poisoned"
            ? html`<form method="post" action="/dashboard/requeue">
                <input type="hidden" name="id" value="${event.id}" /><button>Requeue</button>
              </form>`
            : ""
        }
        <h2>Fan-out</h2>
        ${
          fanout.length === 0
            ? html`<p>${event.fannedOutAt ? "No subscription matched." : "Not yet."}</p>`
            : html`<table>
                <tr>
                  <th>subscription</th>
                  <th>job</th>
                </tr>
                ${fanout.map(
                  ([sub, entry]) =>
                    html`<tr>
                      <td>${sub}</td>
                      <td>
                        ${
                          "coalescedInto" in entry
                            ? html`coalesced into
                                <a href="/dashboard/events/${entry.coalescedInto}">${entry.coalescedInto}</a>`
                            : `${entry.messageId}${entry.deduplicated ? " (deduplicated)" : ""}`
                        }
                      </td>
                    </tr>`,
                )}
              </table>`
        }
        <h2>Payload</h2>
        <pre>${JSON.stringify(event.payload, null, 2)}</pre>
        <h2>Alerts</h2>
        ${
          event.alerts.length === 0
            ? html`<p>None.</p>`
            : html`<ul>
                ${event.alerts.map((a) => html`<li>${iso(a.createdAt)} ${a.kind}: ${a.message}</li>`)}
              </ul>`
        }
      `,
    );
  });

  app.post("/dashboard/requeue", valid("form", requeueForm), async (c) => {
    const id = c.req.valid("form").id;
    const result = await requeue(c.var.pool, [id]);
    if (result.unknown.length > 0) throw new ApiError("NOT_FOUND", `event ${id} not found`);
    // Post/redirect/get: a reload of the page does not post again.
    return c.redirect(`/dashboard?${result.requeued.length > 0 ? "requeued" : "unchanged"}=${id}`, 303);
  });
}

function iso(d: Date | null): string {
  return d ? d.toISOString() : "-";
}

function page(c: Context<HonoEnv>, title: string, body: HtmlEscapedString | Promise<HtmlEscapedString>) {
  return c.html(
    html`<!doctype html>
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <title>${title}</title>
          <style>
            ${raw(STYLE)}
          </style>
        </head>
        <body>
          <h1>${title}</h1>
          ${body}
        </body>
      </html>`,
  );
}

const STYLE = `body{font:14px/1.4 system-ui,sans-serif;margin:2rem;max-width:70rem}
table{border-collapse:collapse;margin-bottom:1rem}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left;vertical-align:top}
.error{color:#a00;white-space:pre-wrap}.notice{background:#efe;padding:.5rem}pre{background:#f6f6f6;padding:.5rem}`;
