import type { Hono } from "hono";
import { z } from "zod";
import { rotateSecret } from "../../../domain/webhooks/rotate-secret.ts";
import { updateEndpoint } from "../../../domain/webhooks/update.ts";
import {
  endpointDeliveries,
  endpointHealth,
  type EndpointHealth,
} from "../../../domain/webhooks/delivery-log.ts";
import { ApiError } from "../../errors.ts";
import { idParam } from "../../routes/params.ts";
import { valid } from "../../validate.ts";
import { requireSecretsKey, webhookSecretsKey } from "../../webhook-secrets-key.ts";
import type { DashboardEnv } from "../env.ts";
import { Notice, StateBadge, render, time } from "../layout.tsx";

/**
 * Webhook endpoints: their health, what was delivered, enable/disable and secret
 * rotation through the endpoint use cases (src/domain/webhooks). A secret is shown
 * once, in the answer to the rotation that made it, and never on any other page.
 * Send test, redeliver and recover wait for the delivery engine's use cases.
 */

const enabledForm = z.object({ enabled: z.enum(["true", "false"]).transform((v) => v === "true") });

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
        <Notice
          text={
            c.req.query("enabled") !== undefined
              ? "Endpoint enabled."
              : c.req.query("disabled") !== undefined
                ? "Endpoint disabled."
                : undefined
          }
        />
        <h1 class="mono">{endpoint.url}</h1>
        <div class="actions">
          <form class="inline" method="post" action={`/dashboard/webhooks/${endpoint.id}/enabled`}>
            <input type="hidden" name="enabled" value={endpoint.enabled ? "false" : "true"} />
            <button class={endpoint.enabled ? "btn danger" : "btn"} type="submit">
              {endpoint.enabled ? "Disable" : "Enable"}
            </button>
          </form>
          <form class="inline" method="post" action={`/dashboard/webhooks/${endpoint.id}/rotate-secret`}>
            <button class="btn secondary" type="submit">
              Rotate secret
            </button>
          </form>
        </div>
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

  dashboard.post(
    "/webhooks/:id/enabled",
    idParam("webhook endpoint"),
    valid("form", enabledForm),
    async (c) => {
      const id = c.req.valid("param").id;
      const { enabled } = c.req.valid("form");
      // Only `enabled` changes, so the URL policy is never consulted; it is passed as the API passes it.
      await updateEndpoint(
        c.var.db,
        id,
        { enabled },
        { allowPrivate: c.var.config.WEBHOOK_ALLOW_PRIVATE_URLS },
      );
      return c.redirect(`/dashboard/webhooks/${id}?${enabled ? "enabled" : "disabled"}=1`, 303);
    },
  );

  // Answered with a page, not a redirect: the new secret is in this one response and nowhere else.
  dashboard.post("/webhooks/:id/rotate-secret", idParam("webhook endpoint"), requireSecretsKey, async (c) => {
    const id = c.req.valid("param").id;
    const key = await webhookSecretsKey(c.var.config);
    const { secret, endpoint } = await rotateSecret(c.var.db, key, id, {
      windowHours: c.var.config.WEBHOOK_SECRET_ROTATION_HOURS,
    });
    return render(
      c,
      { title: "New signing secret", section: "webhooks" },
      <div class="panel">
        <h1>New signing secret</h1>
        <p>
          {"For "}
          <span class="mono">{endpoint.url}</span>
          {". Copy it now: it is not shown again."}
        </p>
        <pre id="secret">{secret}</pre>
        <p class="muted">
          {endpoint.previousSecretExpiresAt
            ? `The previous secret keeps signing beside it until ${time(endpoint.previousSecretExpiresAt)}.`
            : "The previous secret no longer signs."}
        </p>
        <p>
          <a href={`/dashboard/webhooks/${id}`}>Back to the endpoint</a>
        </p>
      </div>,
    );
  });
}
