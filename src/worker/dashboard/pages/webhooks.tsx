import type { Hono } from "hono";
import {
  endpointDeliveries,
  endpointHealth,
  type EndpointHealth,
} from "../../../domain/webhooks/delivery-log.ts";
import { ApiError } from "../../errors.ts";
import { idParam } from "../../routes/params.ts";
import type { DashboardEnv } from "../env.ts";
import { StateBadge, render, time } from "../layout.tsx";

/**
 * Webhook endpoints, read-only for now: their health and what was delivered.
 * The actions (enable/disable, rotate, send test, redeliver, recover) belong with
 * the endpoint use cases the webhooks work is adding; they join these pages then.
 * The secret is never shown here: it exists only sealed in the table.
 */

function successRate(e: EndpointHealth): string {
  if (e.attempts24h === 0) return "no attempts";
  return `${((100 * e.succeeded24h) / e.attempts24h).toFixed(1)} % of ${e.attempts24h}`;
}

function health(e: EndpointHealth): { label: string; tone: string } {
  if (!e.enabled) return { label: "disabled", tone: "failed" };
  if (e.failingSince) return { label: "failing", tone: "failed" };
  return { label: "healthy", tone: "delivered" };
}

export function registerWebhooks(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/webhooks", async (c) => {
    const endpoints = await endpointHealth(c.var.db);
    return render(
      c,
      { title: "Webhooks", section: "webhooks" },
      <>
        <h1>Webhook endpoints</h1>
        {endpoints.length === 0 ? (
          <p class="muted">No endpoints.</p>
        ) : (
          <table>
            <tr>
              <th>endpoint</th>
              <th>scope</th>
              <th>health</th>
              <th>success, last 24 h</th>
              <th>last success</th>
              <th>failing since</th>
              <th class="num">pending</th>
              <th class="num">gave up</th>
            </tr>
            {endpoints.map((e) => {
              const h = health(e);
              return (
                <tr>
                  <td>
                    <a class="mono" href={`/dashboard/webhooks/${e.id}`}>
                      {e.url}
                    </a>
                    {e.description ? <div class="muted">{e.description}</div> : null}
                  </td>
                  <td>{e.scope ?? "–"}</td>
                  <td>
                    <span class={`state state-${h.tone}`}>{h.label}</span>
                    {e.disabledReason ? <div class="error">{e.disabledReason}</div> : null}
                  </td>
                  <td>{successRate(e)}</td>
                  <td class="time">{time(e.lastSuccessAt)}</td>
                  <td class="time">{time(e.failingSince)}</td>
                  <td class="num">{String(e.pending)}</td>
                  <td class="num">{String(e.failed)}</td>
                </tr>
              );
            })}
          </table>
        )}
      </>,
    );
  });

  dashboard.get("/webhooks/:id", idParam("webhook endpoint"), async (c) => {
    const id = c.req.valid("param").id;
    const [endpoint] = await endpointHealth(c.var.db, id);
    if (!endpoint) throw new ApiError("NOT_FOUND", `webhook endpoint ${id} not found`);
    const deliveries = await endpointDeliveries(c.var.db, id);
    const h = health(endpoint);
    return render(
      c,
      { title: "Webhook endpoint", section: "webhooks" },
      <>
        <h1 class="mono">{endpoint.url}</h1>
        <table class="kv">
          <tr>
            <th>health</th>
            <td>
              <span class={`state state-${h.tone}`}>{h.label}</span>
              {endpoint.disabledReason
                ? ` since ${time(endpoint.disabledAt)}: ${endpoint.disabledReason}`
                : ""}
            </td>
          </tr>
          <tr>
            <th>event types</th>
            <td class="mono">{endpoint.types.join(", ")}</td>
          </tr>
          <tr>
            <th>scope</th>
            <td>{endpoint.scope ?? "–"}</td>
          </tr>
          <tr>
            <th>success, last 24 h</th>
            <td>{successRate(endpoint)}</td>
          </tr>
          <tr>
            <th>last success</th>
            <td>{time(endpoint.lastSuccessAt)}</td>
          </tr>
          <tr>
            <th>failing since</th>
            <td>{time(endpoint.failingSince)}</td>
          </tr>
        </table>
        <h2>Deliveries, newest first</h2>
        {deliveries.length === 0 ? (
          <p class="muted">None yet.</p>
        ) : (
          <table>
            <tr>
              <th>created</th>
              <th>event</th>
              <th>status</th>
              <th class="num">attempts</th>
              <th>last attempt</th>
              <th>next attempt</th>
              <th>last error</th>
            </tr>
            {deliveries.map((d) => (
              <tr>
                <td class="time">{time(d.createdAt)}</td>
                <td>
                  <a href={`/dashboard/events/${d.eventId}`}>{d.eventType}</a>
                </td>
                <td>
                  <StateBadge state={d.status} />
                </td>
                <td class="num">{String(d.attempts)}</td>
                <td class="time">{time(d.lastAttemptAt)}</td>
                <td class="time">{d.status === "pending" ? time(d.nextAttemptAt) : "–"}</td>
                <td class="error">{d.lastError ?? ""}</td>
              </tr>
            ))}
          </table>
        )}
      </>,
    );
  });
}
