import type { Context, Hono } from "hono";
import { z } from "zod";
import { recoverDeliveries, recoveredText } from "../../../domain/webhooks/recover.ts";
import {
  SecretAlreadyRotatedError,
  rotateSecret,
  secretVersion,
} from "../../../domain/webhooks/rotate-secret.ts";
import { sendTestEvent } from "../../../domain/webhooks/send-test.ts";
import {
  unmatchedTypesText,
  updateEndpointInput,
  type EndpointView,
} from "../../../domain/webhooks/schemas.ts";
import { EndpointChangedError, updateEndpoint } from "../../../domain/webhooks/update.ts";
import {
  endpointDeliveries,
  endpointHealth,
  healthLabel,
  laggingText,
  successRateText,
  type EndpointHealth,
} from "../../../domain/webhooks/delivery-log.ts";
import { ApiError } from "../../errors.ts";
import { idParam } from "../../routes/params.ts";
import { plainWords, valid } from "../../validate.ts";
import { endpointFormRefusal, readEndpointForm } from "./endpoint-form.ts";
import { deliverQueueFor, queuedOrRefused } from "../../webhooks.ts";
import { DELIVER_PARALLELISM } from "../../../domain/webhooks/deliver-queue.ts";
import { requireSecretsKey, webhookSecretsKey } from "../../webhook-secrets-key.ts";
import type { DashboardEnv } from "../env.ts";
import {
  Confirm,
  Notice,
  Pager,
  StateBadge,
  focusedOnLoad,
  render,
  Table,
  time,
  Unseen,
} from "../layout.tsx";
import { RedeliverForm, deliveryEventHref, deliveryHref } from "./webhook-deliveries.tsx";
import { NewEndpointForm, registerWebhookCreate } from "./webhook-create.tsx";
import { knownScopes } from "../../../domain/webhooks/create.ts";

/**
 * Webhook endpoints: their health, what was delivered, enable/disable and secret
 * rotation through the endpoint use cases (src/domain/webhooks). A secret is shown
 * once, in the answer to the rotation that made it, and never on any other page.
 * Send test and recover go through the delivery use cases (send-test.ts,
 * recover.ts); redeliver is on each delivery (webhook-deliveries.tsx).
 */

const enabledForm = z.object({ enabled: z.enum(["true", "false"]).transform((v) => v === "true") });

/**
 * The secret the rotate form was shown with (rotate-secret.ts's secretVersion).
 * The answer to a rotation is that POST's own page, and reloading it sends the
 * form again: without this, the reload rotated a second time, retiring the secret
 * the receiver still used and leaving the one just copied to expire.
 */
const rotateForm = z.object({
  version: z
    .string()
    .regex(/^[0-9a-f]{32}$/, "must come from the endpoint page's rotate form: rotate from there"),
});

/**
 * `<input type="datetime-local">` sends no zone; the dashboard shows UTC everywhere, so it is read as UTC.
 * A form without the field (or with it empty) hears that it is required, as the admin route says it.
 */
const SINCE_REQUIRED = "is required: a date and time, e.g. 2026-12-03T08:00";
const SINCE_MALFORMED = "must be a date and time, e.g. 2026-12-03T08:00";
const recoverForm = z.object({
  since: z
    .string({ error: (issue) => (issue.input === undefined ? SINCE_REQUIRED : SINCE_MALFORMED) })
    .trim()
    .min(1, SINCE_REQUIRED)
    .transform((v) => new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(v) ? v : `${v}Z`))
    .refine((d) => !Number.isNaN(+d), SINCE_MALFORMED),
});

/** The deliveries page cursor: `<created_at to the microsecond>,<id>` as delivery-log.ts hands it out. */
const CURSOR =
  /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z),([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

const endpointQuery = z.object({
  before: z
    .string()
    .regex(CURSOR, "must be a cursor from this page's older link")
    .transform((v) => {
      const [, createdAt, id] = CURSOR.exec(v)!;
      return { createdAt: createdAt!, id: id! };
    })
    .optional(),
  // Notices are chosen by these numbers and flags, never taken as text (ADR 0009).
  recovered: z.coerce.number().int().min(0).optional(),
  retrying: z.coerce.number().int().min(0).optional(),
  more: z.literal("1").optional(),
});

function recoveredNotice(n: number | undefined, retrying: number, more: boolean): string | undefined {
  if (n === undefined) return undefined;
  if (n === 0) return "No delivery since that time gave up or waits for a retry: nothing to recover.";
  const what = `Recovered ${recoveredText(n, Math.min(retrying, n))}: back to pending, each sent now by a new job.`;
  return more ? `${what} More remain: recover again.` : what;
}

/** The recover form's starting value: a day ago, to the minute, UTC. */
const dayAgo = () => new Date(Date.now() - 86_400_000).toISOString().slice(0, 16);

function health(e: EndpointHealth): { label: string; tone: string } {
  const label = healthLabel(e);
  // Lagging fails nothing: the pending tone, not the failed one.
  return { label, tone: label === "healthy" ? "delivered" : label === "lagging" ? "pending" : "failed" };
}

/** The answer to a rotation: the only place the new secret is ever shown. */
function newSecretPage(c: Context<DashboardEnv>, id: string, secret: string, endpoint: EndpointView) {
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
      {/* Focused when the page comes, so a keyboard is at it and a screen reader reads it
          (a pre takes no focus; a label would have been read instead of the secret). */}
      <pre id="secret" tabindex={0} autofocus>
        {secret}
      </pre>
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
}

/** What the edit form holds: the endpoint's fields, or what a refused form sent. */
interface EditValues {
  version: string;
  url: string;
  /** As typed: globs separated by commas or spaces. */
  types: string;
  description: string;
}

function EditForm({ id, values, open = false }: { id: string; values: EditValues; open?: boolean }) {
  return (
    <details class="edit" open={open}>
      <summary>Edit URL, event types or description</summary>
      <form method="post" action={`/dashboard/webhooks/${id}/edit`}>
        <input type="hidden" name="version" value={values.version} />
        <label for="url">URL</label>
        <input id="url" type="url" name="url" value={values.url} required />
        <label for="types">event types (globs, separated by commas or spaces)</label>
        <input id="types" type="text" name="types" value={values.types} required />
        <label for="description">description</label>
        {/* A textarea: a one-line input drops the line breaks the API accepts, so
            saving only new event types lost them. */}
        <textarea id="description" name="description" rows={3} maxlength={500}>
          {values.description}
        </textarea>
        <button class="btn secondary" type="submit">
          Save
        </button>
      </form>
    </details>
  );
}

/** What an endpoint has now, as a refused edit's page shows it beside what was typed. */
interface EndpointNow {
  id: string;
  url: string;
  types: string[];
  description: string;
  enabled: boolean;
}

/**
 * A refused edit answers with the form again, holding what was sent and open, under
 * the reason: the error page alone lost a long list of globs to one typo, since a
 * page served no-store is not restored by the browser's Back. With `now`, what the
 * endpoint has since someone else changed it, above the form.
 */
function notSavedPage(
  c: Context<DashboardEnv>,
  id: string,
  values: EditValues,
  why: string,
  status: 400 | 409,
  now?: EndpointNow,
) {
  return render(
    c,
    { title: "Endpoint not saved", section: "webhooks" },
    <div class="panel">
      <h1>Endpoint not saved</h1>
      <p class="error" role="alert" {...focusedOnLoad()}>
        {why}
      </p>
      {now ? (
        <Table class="kv">
          <tr>
            <th>url</th>
            <td class="mono">{now.url}</td>
          </tr>
          <tr>
            <th>types</th>
            <td class="mono">{now.types.join(", ")}</td>
          </tr>
          <tr>
            <th>description</th>
            <td>{now.description || "–"}</td>
          </tr>
          <tr>
            <th>enabled</th>
            <td>{now.enabled ? "yes" : "no"}</td>
          </tr>
        </Table>
      ) : null}
      <EditForm id={id} values={values} open />
      <p>
        <a href={`/dashboard/webhooks/${id}`}>Back to the endpoint, unchanged</a>
      </p>
    </div>,
    status,
  );
}

/** A bad value: the refusal's words (endpointFormRefusal). */
function refusedEdit(c: Context<DashboardEnv>, id: string, values: EditValues, why: string) {
  return notSavedPage(c, id, values, why, 400);
}

/**
 * An edit refused because the endpoint changed since the form was shown (another tab,
 * another operator): what it has now, and the form again with what was typed and
 * today's version, so a second Save means "mine over theirs" knowingly. It answered a
 * bare 409 page before, with the typed values gone and a link to the overview only
 * (the dashboard walkthrough).
 */
function changedEdit(c: Context<DashboardEnv>, now: EndpointNow, typed: EditValues) {
  return notSavedPage(
    c,
    now.id,
    typed,
    "It was changed since this form was opened (in another tab, or by someone else); nothing was saved. " +
      "What it has now is below, then your values: Save replaces what it has with them.",
    409,
    now,
  );
}

/** A rotate form whose secret was already replaced: nothing changed, and no secret is shown. */
function alreadyRotatedPage(c: Context<DashboardEnv>, id: string, changedAt: Date) {
  return render(
    c,
    { title: "Secret already rotated", section: "webhooks" },
    <div class="panel">
      <h1>Secret already rotated</h1>
      <p class="alert-box" role="alert">
        {`The secret this form was shown with was already rotated (the endpoint last changed at ${time(changedAt)}). `}
        {"Nothing was rotated now, and no secret is shown."}
      </p>
      <p>
        {"A reload of the new secret's page sends its form again; this did not replace that secret. "}
        <a href={`/dashboard/webhooks/${id}`}>Rotate again from the endpoint page</a>
        {" if you meant to."}
      </p>
    </div>,
    409,
  );
}

/** Enables or disables an endpoint (Disable asks first: layout.tsx, Confirm). */
function EnabledForm({ id, enabled }: { id: string; enabled: boolean }) {
  return (
    <form class="inline" method="post" action={`/dashboard/webhooks/${id}/enabled`}>
      <input type="hidden" name="enabled" value={String(enabled)} />
      <button class={enabled ? "btn" : "btn danger"} type="submit">
        {enabled ? "Enable" : "Yes, disable it"}
      </button>
    </form>
  );
}

export function registerWebhooks(dashboard: Hono<DashboardEnv>) {
  registerWebhookCreate(dashboard);
  dashboard.get("/webhooks", async (c) => {
    const [endpoints, scopes] = await Promise.all([endpointHealth(c.var.db), knownScopes(c.var.db)]);
    return render(
      c,
      { title: "Webhooks", section: "webhooks" },
      <>
        <h1>Webhook endpoints</h1>
        {c.var.config.WEBHOOK_SECRETS_KEY ? (
          // Open while there is none: adding one is then the page's only use.
          <NewEndpointForm scopes={scopes} open={endpoints.length === 0} />
        ) : (
          <p class="muted">
            Adding an endpoint needs the WEBHOOK_SECRETS_KEY binding, which seals its secret.
          </p>
        )}
        {endpoints.length === 0 ? (
          <p class="muted">No endpoints.</p>
        ) : (
          <Table stack>
            <tr>
              <th>endpoint</th>
              <th>scope</th>
              <th>health</th>
              <th>{"success, last 24\u00a0h"}</th>
              <th>last success</th>
              <th>failing since</th>
              <th class="num">pending</th>
              <th class="num">gave up</th>
            </tr>
            {endpoints.map((e) => {
              const h = health(e);
              return (
                <tr>
                  <td data-label="endpoint">
                    <a class="mono" href={`/dashboard/webhooks/${e.id}`}>
                      {e.url}
                    </a>
                    {e.description ? <div class="muted desc">{e.description}</div> : null}
                  </td>
                  <td data-label="scope">{e.scope ?? "–"}</td>
                  <td data-label="health">
                    <span class={`state state-${h.tone}`}>{h.label}</span>
                    {e.disabledReason ? <div class="error">{e.disabledReason}</div> : null}
                    {e.lagging ? <div class="muted">{`${e.lagging.waiting} waiting`}</div> : null}
                  </td>
                  <td data-label={"success, last 24\u00a0h"}>{successRateText(e)}</td>
                  <td class="time" data-label="last success">
                    {time(e.lastSuccessAt)}
                  </td>
                  <td class="time" data-label="failing since">
                    {time(e.failingSince)}
                  </td>
                  <td class="num" data-label="pending">
                    {String(e.pending)}
                  </td>
                  <td class="num" data-label="gave up">
                    {String(e.failed)}
                  </td>
                </tr>
              );
            })}
          </Table>
        )}
      </>,
    );
  });

  dashboard.get("/webhooks/:id", idParam("webhook endpoint"), valid("query", endpointQuery), async (c) => {
    const id = c.req.valid("param").id;
    const q = c.req.valid("query");
    const [[endpoint], version] = await Promise.all([
      endpointHealth(c.var.db, id),
      secretVersion(c.var.db, id),
    ]);
    if (!endpoint || version === undefined)
      throw new ApiError("NOT_FOUND", `webhook endpoint ${id} not found`);
    const { deliveries, next } = await endpointDeliveries(c.var.db, id, { before: q.before });
    const h = health(endpoint);
    const unmatched = unmatchedTypesText(endpoint.types);
    return render(
      c,
      { title: `Webhook endpoint ${endpoint.url}`, section: "webhooks" },
      <>
        <Notice
          text={
            c.req.query("edited") !== undefined
              ? "Endpoint saved: deliveries from now on go to this URL, for these event types."
              : c.req.query("enabled") !== undefined
                ? "Endpoint enabled: it is sent the events recorded from now on. Events recorded while it was disabled made no delivery for it; Recover deliveries sends again the ones that failed."
                : c.req.query("disabled") !== undefined
                  ? "Endpoint disabled."
                  : recoveredNotice(q.recovered, q.retrying ?? 0, q.more !== undefined)
          }
        />
        <h1 class="mono">{endpoint.url}</h1>
        {endpoint.description ? <p class="muted desc">{endpoint.description}</p> : null}
        <div class="actions">
          {endpoint.enabled ? (
            <Confirm
              label="Disable"
              danger
              // Said as it is: the pending fail, they do not wait, and events meanwhile make
              // no delivery at all. An operator who meant to pause a flaky receiver found
              // them failed after enabling it; "Recover sends them again" then read as if
              // it covered the events of the gap too (the dashboard walkthrough).
              says="Stops deliveries to this endpoint: its pending deliveries fail without a request (once it is enabled again, Recover sends those again), and events recorded while it is disabled make no delivery for it, now or later. Disable to stop its webhooks, not to pause them."
            >
              <EnabledForm id={endpoint.id} enabled={false} />
            </Confirm>
          ) : (
            <EnabledForm id={endpoint.id} enabled={true} />
          )}
          <Confirm
            label="Rotate secret"
            says={`Makes a new signing secret, shown once on the next page; the current one keeps signing beside it for ${c.var.config.WEBHOOK_SECRET_ROTATION_HOURS} h, while the receiver switches.`}
          >
            <form class="inline" method="post" action={`/dashboard/webhooks/${endpoint.id}/rotate-secret`}>
              <input type="hidden" name="version" value={version} />
              <button class="btn" type="submit">
                Yes, rotate the secret
              </button>
            </form>
          </Confirm>
          {endpoint.enabled ? (
            <form class="inline" method="post" action={`/dashboard/webhooks/${endpoint.id}/test`}>
              <button class="btn secondary" type="submit">
                Send test event
              </button>
            </form>
          ) : null}
        </div>
        {endpoint.enabled ? (
          <div class="actions">
            <Confirm
              label="Recover deliveries…"
              // Those waiting for a retry too: once a receiver is fixed, theirs can be
              // hours away (recover.ts).
              says="Sends again now every delivery to this endpoint, created since the time below, that gave up or waits for a retry: each goes back to pending and is sent by a new job. One being attempted right now is left to finish."
            >
              <form method="post" action={`/dashboard/webhooks/${endpoint.id}/recover`}>
                <label for="since">Created since (UTC)</label>
                <input id="since" type="datetime-local" name="since" value={dayAgo()} required />
                <button class="btn" type="submit">
                  Recover
                </button>
              </form>
            </Confirm>
          </div>
        ) : (
          <p class="muted">Enable the endpoint to send a test event, redeliver or recover.</p>
        )}
        <Table class="kv">
          <tr>
            <th>health</th>
            <td>
              <span class={`state state-${h.tone}`}>{h.label}</span>
              {endpoint.disabledReason
                ? ` since ${time(endpoint.disabledAt)}: ${endpoint.disabledReason}`
                : ""}
              {h.label === "failing"
                ? " — its deliveries are retried on a schedule, hours apart by the later attempts: once its receiver answers, Recover deliveries sends them now."
                : ""}
              {endpoint.lagging && h.label === "lagging"
                ? ` — it does not keep up: ${laggingText(endpoint.lagging)}. They are queued in QStash behind its ${DELIVER_PARALLELISM} deliveries in flight: a redeliver would only queue them again.`
                : ""}
            </td>
          </tr>
          <tr>
            <th>event types</th>
            <td class="mono">
              {endpoint.types.join(", ")}
              {unmatched ? <span class="error">{` — ${unmatched}`}</span> : null}
            </td>
          </tr>
          <tr>
            <th>scope</th>
            <td>{endpoint.scope ?? "–"}</td>
          </tr>
          <tr>
            <th>{"success, last 24\u00a0h"}</th>
            <td>{successRateText(endpoint)}</td>
          </tr>
          <tr>
            <th>last success</th>
            <td>{time(endpoint.lastSuccessAt)}</td>
          </tr>
          <tr>
            <th>failing since</th>
            <td>{time(endpoint.failingSince)}</td>
          </tr>
          <tr>
            <th>pending</th>
            <td>{String(endpoint.pending)}</td>
          </tr>
          <tr>
            <th>gave up</th>
            {/* "healthy" says the endpoint works now; deliveries that gave up during an
                outage are still owed to its receiver (a walkthrough read "healthy" beside
                43 of them on this page, with no count anywhere on it). */}
            <td class={endpoint.failed > 0 ? "error" : undefined}>
              {endpoint.failed === 0
                ? "0"
                : `${endpoint.failed} deliver${endpoint.failed === 1 ? "y" : "ies"} not sent: ${
                    endpoint.enabled ? "" : "enable the endpoint, then "
                  }Recover deliveries sends ${endpoint.failed === 1 ? "it" : "them"} again`}
            </td>
          </tr>
        </Table>
        <EditForm
          id={endpoint.id}
          values={{
            version: endpoint.version,
            url: endpoint.url,
            types: endpoint.types.join(", "),
            description: endpoint.description,
          }}
        />
        <h2>Deliveries, newest first</h2>
        {deliveries.length === 0 ? (
          <p class="muted">{q.before ? "No older deliveries." : "None yet."}</p>
        ) : (
          <Table id="deliveries" stack>
            <tr>
              <th>created</th>
              <th>event</th>
              <th>status</th>
              <th class="num">attempts</th>
              <th>last attempt</th>
              <th>next attempt</th>
              <th>last error</th>
              {endpoint.enabled ? (
                <th>
                  <Unseen>action</Unseen>
                </th>
              ) : null}
            </tr>
            {deliveries.map((d) => (
              <tr>
                <td class="time" data-label="created">
                  <a href={deliveryHref(d.id)}>{time(d.createdAt)}</a>
                </td>
                <td data-label="event">
                  <a href={deliveryEventHref(d)}>{d.eventType}</a>
                </td>
                <td data-label="status">
                  <StateBadge state={d.status} />
                </td>
                <td class="num" data-label="attempts">
                  <a href={deliveryHref(d.id)}>{String(d.attempts)}</a>
                </td>
                <td class="time" data-label="last attempt">
                  {time(d.lastAttemptAt)}
                </td>
                <td class="time" data-label="next attempt">
                  {d.overdueSince && endpoint.lagging && d.attempts === 0 ? (
                    // Not lost: queued behind the endpoint's deliveries in flight (it lags).
                    <span
                      class="state state-pending"
                      title="waiting for its first attempt: the endpoint does not keep up"
                    >
                      {`queued since ${time(d.overdueSince)}`}
                    </span>
                  ) : d.overdueSince ? (
                    <span class="state state-pending" title="past due: QStash has not come back for it">
                      {`overdue since ${time(d.overdueSince)}`}
                    </span>
                  ) : d.status === "pending" ? (
                    time(d.nextAttemptAt)
                  ) : (
                    "–"
                  )}
                </td>
                <td class="error" data-label="last error">
                  {d.lastError ?? ""}
                </td>
                {endpoint.enabled ? (
                  <td data-label="action">
                    <RedeliverForm deliveryId={d.id} />
                  </td>
                ) : null}
              </tr>
            ))}
          </Table>
        )}
        <Pager
          newest={q.before ? `/dashboard/webhooks/${endpoint.id}` : undefined}
          older={
            next
              ? `/dashboard/webhooks/${endpoint.id}?${new URLSearchParams({ before: `${next.createdAt},${next.id}` })}`
              : undefined
          }
        />
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

  // The same rules as PATCH /admin/webhooks/endpoints/:id (the URL policy included); the
  // scope never changes. A refused value is a 400 page saying which field and why.
  dashboard.post("/webhooks/:id/edit", idParam("webhook endpoint"), async (c) => {
    const id = c.req.valid("param").id;
    const { text, types, globs, description } = await readEndpointForm(c);
    const input = { url: text("url"), types: globs, description };
    const policy = { allowPrivate: c.var.config.WEBHOOK_ALLOW_PRIVATE_URLS };
    const version = text("version");
    if (!version) throw new ApiError("BAD_REQUEST", "endpoint not saved: the form carries no version");
    const parsed = updateEndpointInput(policy).safeParse(input, { error: plainWords("form") });
    if (!parsed.success) {
      const sent = {
        version,
        url: input.url ?? "",
        types: types ?? "",
        description: input.description ?? "",
      };
      return refusedEdit(c, id, sent, endpointFormRefusal("endpoint not saved", parsed.error, input));
    }
    try {
      await updateEndpoint(c.var.db, id, parsed.data, policy, { ifVersion: version });
    } catch (error) {
      if (!(error instanceof EndpointChangedError)) throw error;
      const [now] = await endpointHealth(c.var.db, id);
      if (!now) throw new ApiError("NOT_FOUND", `webhook endpoint ${id} not found`);
      return changedEdit(c, now, {
        version: now.version,
        url: input.url ?? "",
        types: types ?? "",
        description: input.description ?? "",
      });
    }
    return c.redirect(`/dashboard/webhooks/${id}?edited=1`, 303);
  });

  // Answered with a page, not a redirect: the new secret is in this one response and nowhere else.
  // A stale form (a reload of that page, or a second tab) is refused with 409 and shows no secret.
  dashboard.post(
    "/webhooks/:id/rotate-secret",
    idParam("webhook endpoint"),
    valid("form", rotateForm),
    requireSecretsKey,
    async (c) => {
      const id = c.req.valid("param").id;
      const key = await webhookSecretsKey(c.var.config);
      try {
        const { secret, endpoint } = await rotateSecret(c.var.db, key, id, {
          windowHours: c.var.config.WEBHOOK_SECRET_ROTATION_HOURS,
          ifVersion: c.req.valid("form").version,
        });
        return newSecretPage(c, id, secret, endpoint);
      } catch (e) {
        if (e instanceof SecretAlreadyRotatedError) return alreadyRotatedPage(c, id, e.changedAt);
        throw e;
      }
    },
  );

  dashboard.post("/webhooks/:id/test", idParam("webhook endpoint"), async (c) => {
    const id = c.req.valid("param").id;
    const { deliveryId } = await queuedOrRefused(`webhook endpoint ${id}`, () =>
      sendTestEvent(c.var.db, deliverQueueFor(c.var.config), id),
    );
    return c.redirect(`${deliveryHref(deliveryId)}?tested=1`, 303);
  });

  // Only this endpoint's deliveries of its own scope (recover.ts), one batch a post.
  dashboard.post(
    "/webhooks/:id/recover",
    idParam("webhook endpoint"),
    valid("form", recoverForm),
    async (c) => {
      const id = c.req.valid("param").id;
      const { since } = c.req.valid("form");
      const { recovered, retrying, more } = await queuedOrRefused(
        `the deliveries to recover of webhook endpoint ${id}`,
        () => recoverDeliveries(c.var.db, deliverQueueFor(c.var.config), id, since),
      );
      return c.redirect(
        `/dashboard/webhooks/${id}?recovered=${recovered}&retrying=${retrying}${more ? "&more=1" : ""}`,
        303,
      );
    },
  );
}
