import type { Hono } from "hono";
import {
  attemptsMade,
  deliveryWithAttempts,
  toldHeaders,
  unrecordedAttempts,
  type AttemptRow,
} from "../../../domain/webhooks/delivery-log.ts";
import { redeliver } from "../../../domain/webhooks/redeliver.ts";
import { TEST_EVENT_TYPE } from "../../../domain/webhooks/send-test.ts";
import { ApiError } from "../../errors.ts";
import { idParam } from "../../routes/params.ts";
import { deliverQueueFor, queuedOrRefused } from "../../webhooks.ts";
import type { DashboardEnv } from "../env.ts";
import {
  asSentence,
  isReload,
  Notice,
  reloadUrl,
  StateBadge,
  render,
  Table,
  time,
  Unseen,
} from "../layout.tsx";

/**
 * One webhook delivery with every attempt, and redeliver through the delivery
 * use case (src/domain/webhooks/redeliver.ts). It is also where a `webhook.test`
 * delivery is shown: a test event is no row in `events`, so it has no event page.
 */

/** Where a delivery's "event" links: its event's page, or for a test event (no event row) the delivery's own. */
export function deliveryEventHref(d: { id: string; eventId: string; eventType: string }): string {
  return d.eventType === TEST_EVENT_TYPE ? deliveryHref(d.id) : `/dashboard/events/${d.eventId}`;
}

export const deliveryHref = (id: string) => `/dashboard/webhooks/deliveries/${id}`;

/**
 * A delivery's attempts, oldest first. Where any went to another URL than the
 * endpoint's `url` now (it was changed since), a column says where each went.
 */
export function AttemptTable({
  attempts,
  url,
  made,
  inProgress,
}: {
  attempts: AttemptRow[];
  url: string;
  made: number;
  inProgress: boolean;
}) {
  const unrecorded = unrecordedAttempts(made, attempts.length, inProgress);
  const note = unrecorded ? <p class="muted">{asSentence(unrecorded)}</p> : null;
  if (attempts.length === 0) return note ?? <p class="muted">No attempt yet.</p>;
  const moved = attempts.some((a) => a.url !== null && a.url !== url);
  return (
    <>
      {note}
      <Table class="attempts" stack>
        <tr>
          <th>attempted</th>
          {moved ? <th>sent to</th> : null}
          <th class="num">status</th>
          <th class="num">ms</th>
          <th>error</th>
          <th>response (first 2 KB)</th>
        </tr>
        {attempts.map((a) => {
          const told = toldHeaders(a.responseHeaders);
          return (
            <tr>
              <td class="time" data-label="attempted">
                {time(a.attemptedAt)}
              </td>
              {moved ? (
                <td class="mono" data-label="sent to">
                  {a.url ?? "–"}
                </td>
              ) : null}
              <td class="num" data-label="status">
                {a.status === null ? "–" : String(a.status)}
              </td>
              <td class="num" data-label="ms">
                {String(a.durationMs)}
              </td>
              <td class="error" data-label="error">
                {a.error ?? ""}
              </td>
              <td class="mono" data-label="response (first 2 KB)">
                {told ? <div class="muted">{told}</div> : null}
                {a.responseBody ?? ""}
              </td>
            </tr>
          );
        })}
      </Table>
    </>
  );
}

export function RedeliverForm({ deliveryId, label }: { deliveryId: string; label?: string }) {
  return (
    <form class="inline" method="post" action={`${deliveryHref(deliveryId)}/redeliver`}>
      <button class={label ? "btn secondary" : "btn secondary small"} type="submit">
        {label ?? (
          <>
            Redeliver
            <Unseen>{` delivery …${deliveryId.slice(-12)}`}</Unseen>
          </>
        )}
      </button>
    </form>
  );
}

/** How near a pending delivery's next attempt must be for its page to keep reloading. */
const WATCH_AHEAD_MS = 30_000;

export function registerWebhookDeliveries(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/webhooks/deliveries/:id", idParam("webhook delivery"), async (c) => {
    const id = c.req.valid("param").id;
    const d = await deliveryWithAttempts(c.var.db, id);
    if (!d) throw new ApiError("NOT_FOUND", `webhook delivery ${id} not found`);
    const isTest = d.eventType === TEST_EVENT_TYPE;
    // Fixed texts chosen by a flag: a link must not be able to put words on this page.
    const pending = d.status === "pending";
    // Watched only while an attempt is near: after a failed one the next may be
    // hours away (the retry schedule), and the page reloaded every 2 s meanwhile.
    const soon =
      pending && (d.nextAttemptAt === null || d.nextAttemptAt.getTime() <= Date.now() + WATCH_AHEAD_MS);
    // How it ended, once it has: "Test event sent." alone stood above a delivery that gave up.
    // A redeliver clears last_error, so one on a pending delivery is an attempt since
    // the action: "sent" and a time alone read as success above a 503 (the dashboard
    // walkthrough). The reason is the Worker's own words ("endpoint answered 503").
    const later =
      pending && !soon
        ? d.lastError
          ? ` Its attempt failed (${d.lastError}); the next is at ${time(d.nextAttemptAt)}.`
          : ` Its next attempt is at ${time(d.nextAttemptAt)}.`
        : d.status === "failed"
          ? " It gave up: see its attempts below."
          : d.status === "delivered"
            ? " It was delivered."
            : "";
    const notice =
      c.req.query("tested") !== undefined
        ? soon
          ? "Test event sent. This page shows the result when it is delivered or gives up."
          : `Test event sent.${later}`
        : c.req.query("redelivered") !== undefined
          ? soon
            ? "Queued again: back to pending, sent by a new job. This page shows the result when it settles."
            : `Queued again and sent by a new job.${later}`
          : undefined;
    return render(
      c,
      {
        title: `Webhook delivery ${d.eventType} …${d.id.slice(-12)}`,
        section: "webhooks",
        // Only right after an action, and only while it can still change by itself.
        refresh:
          notice && soon
            ? { seconds: 2, url: reloadUrl(c), stop: `/dashboard/webhooks/deliveries/${d.id}`, watch: true }
            : undefined,
      },
      <>
        <Notice text={notice} focus={!isReload(c)} />
        <h1>
          {`${d.eventType} `}
          <StateBadge state={d.status} />
        </h1>
        <div class="actions">
          <RedeliverForm deliveryId={d.id} label="Redeliver this delivery" />
        </div>
        <Table class="kv">
          <tr>
            <th>endpoint</th>
            <td class="mono">
              <a href={`/dashboard/webhooks/${d.endpointId}`}>{d.endpointUrl}</a>
            </td>
          </tr>
          <tr>
            <th>event</th>
            <td class="mono">
              {isTest ? (
                `${d.eventId} (a test event: sent to this endpoint only, not recorded as an event)`
              ) : (
                <a href={`/dashboard/events/${d.eventId}`}>{d.eventId}</a>
              )}
            </td>
          </tr>
          <tr>
            <th>scope</th>
            <td>{d.scope ?? "–"}</td>
          </tr>
          <tr>
            <th>created</th>
            <td class="time">{time(d.createdAt)}</td>
          </tr>
          <tr>
            <th>outcome</th>
            <td>
              {d.deliveredAt
                ? `delivered ${time(d.deliveredAt)}`
                : d.failedAt
                  ? `gave up ${time(d.failedAt)}`
                  : d.nextAttemptAt
                    ? `next attempt ${time(d.nextAttemptAt)}`
                    : "waiting for its job"}
            </td>
          </tr>
          <tr>
            <th>QStash message</th>
            <td class="mono">{d.messageId ?? "–"}</td>
          </tr>
          <tr>
            <th>last error</th>
            <td class={d.lastError ? "error" : undefined}>{d.lastError ?? "–"}</td>
          </tr>
        </Table>
        <h2>{`Attempts (${attemptsMade(d.attempts, d.attemptLog.length)})`}</h2>
        <AttemptTable
          attempts={d.attemptLog}
          url={d.endpointUrl}
          made={d.attempts}
          inProgress={d.attemptInProgress}
        />
      </>,
    );
  });

  // Whatever its state; the use case refuses a disabled endpoint (409) and keeps to the delivery's scope.
  dashboard.post("/webhooks/deliveries/:id/redeliver", idParam("webhook delivery"), async (c) => {
    const id = c.req.valid("param").id;
    await queuedOrRefused(`delivery ${id}`, () => redeliver(c.var.db, deliverQueueFor(c.var.config), id));
    return c.redirect(`${deliveryHref(id)}?redelivered=1`, 303);
  });
}
