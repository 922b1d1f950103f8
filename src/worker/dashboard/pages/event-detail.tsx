import type { Hono } from "hono";
import { eventJobFailures } from "../../../domain/job-failures/record.ts";
import { alertsShownWithEvent, openAlertsCountingEvent } from "../../../domain/job-failures/retry.ts";
import { deliveriesForEvent, type EventDelivery } from "../../../domain/webhooks/delivery-log.ts";
import { EVENT_GONE_HINT, getEvent, mergedText, relayBackoff, type EventRow } from "../../../outbox/index.ts";
import { ApiError } from "../../errors.ts";
import { idParam } from "../../routes/params.ts";
import type { DashboardEnv } from "../env.ts";
import { Notice, StateBadge, render, Table, time } from "../layout.tsx";
import { JobFailureTable, retriedNotice } from "./job-failures.tsx";
import { AttemptTable, deliveryHref } from "./webhook-deliveries.tsx";
import { eventWaitingNotes } from "../../../domain/webhooks/fanout.ts";
import { jobsWaitingText, type JobsWaiting } from "../../../domain/subscription-backlog.ts";

/** Where the row stands in the relay's eyes; a poisoned row has no next attempt, whatever the column says. */
function attemptsLine(e: EventRow): string {
  const tries = `${e.attempts} failed attempt${e.attempts === 1 ? "" : "s"}`;
  if (e.state === "poisoned")
    return `${tries}; poisoned ${time(e.poisonedAt)}, no further attempts until requeued`;
  if (e.state === "pending" && e.nextAttemptAt)
    return `${tries}; next attempt not before ${time(e.nextAttemptAt)}`;
  return tries;
}

function Deliveries({ deliveries, note }: { deliveries: EventDelivery[]; note: string | null }) {
  if (deliveries.length === 0)
    return (
      <p class="muted">{note ? `Webhook deliveries: ${note}.` : "No webhook deliveries for this event."}</p>
    );
  return (
    <>
      {deliveries.map((d) => (
        <div class="group">
          <h3>
            <a href={`/dashboard/webhooks/${d.endpointId}`}>{d.endpointUrl}</a>
          </h3>
          <div class="meta">
            <StateBadge state={d.status} />
            {` ${d.attempts} attempt${d.attempts === 1 ? "" : "s"} · created ${time(d.createdAt)}`}
            {d.deliveredAt ? ` · delivered ${time(d.deliveredAt)}` : ""}
            {d.failedAt ? ` · gave up ${time(d.failedAt)}` : ""}
            {d.status === "pending" && d.nextAttemptAt ? ` · next attempt ${time(d.nextAttemptAt)}` : ""}
            {d.messageId ? ` · QStash ${d.messageId}` : ""}
            {" · "}
            <a href={deliveryHref(d.id)}>delivery</a>
          </div>
          {d.lastError ? <p class="error">{d.lastError}</p> : null}
          <AttemptTable
            attempts={d.attemptLog}
            url={d.endpointUrl}
            made={d.attempts}
            inProgress={d.attemptInProgress}
          />
        </div>
      ))}
    </>
  );
}

export function registerEventDetail(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/events/:id", idParam("event"), async (c) => {
    const id = c.req.valid("param").id;
    const event = await getEvent(c.var.pool, id);
    if (!event) throw new ApiError("NOT_FOUND", `event ${id} not found: ${EVENT_GONE_HINT}`);
    const [deliveries, failedJobs, counting, backoff] = await Promise.all([
      deliveriesForEvent(c.var.db, event.id),
      eventJobFailures(c.var.db, event.id),
      openAlertsCountingEvent(c.var.db, event.id),
      event.state === "pending" ? relayBackoff(c.var.pool) : Promise.resolve(null),
    ]);
    const shownAlerts = alertsShownWithEvent(event, counting);
    const { jobsWaiting, webhooksNote } = await eventWaitingNotes(
      c.var.db,
      event,
      { jobFailures: failedJobs, webhookDeliveries: deliveries.length },
      time,
    );
    const here = `/dashboard/events/${event.id}`;
    const fanout = Object.entries(event.fanout ?? {});
    return render(
      c,
      // The id's end too: every event of a type had one title, so tabs and history could not tell them apart.
      { title: `Event ${event.type} …${event.id.slice(-12)}`, section: "events" },
      <>
        {/* Fixed texts chosen by a flag: a link must not be able to put words on this page. */}
        <Notice
          text={
            c.req.query("requeued") !== undefined
              ? "Requeued: the relay will fan it out again."
              : c.req.query("unchanged") !== undefined
                ? "Not requeued: the event is no longer poisoned."
                : retriedNotice(failedJobs, Number(c.req.query("retried")))
          }
        />
        <h1>
          {`${event.type} `}
          <StateBadge state={event.state} />
        </h1>
        <Table class="kv">
          <tr>
            <th>id</th>
            <td class="mono">{event.id}</td>
          </tr>
          <tr>
            <th>seq</th>
            <td class="mono">{String(event.seq)}</td>
          </tr>
          <tr>
            <th>subject</th>
            <td class="mono">
              <a href={`/dashboard/events?subject=${encodeURIComponent(event.subject)}`}>{event.subject}</a>
            </td>
          </tr>
          <tr>
            <th>scope</th>
            <td>{event.scope ?? "–"}</td>
          </tr>
          <tr>
            <th>recorded</th>
            <td class="time">{time(event.createdAt)}</td>
          </tr>
          <tr>
            <th>fanned out</th>
            <td>{event.fannedOutAt ? time(event.fannedOutAt) : "not yet"}</td>
          </tr>
          {/* The relay's tries at fanning the event out, not its jobs' (listed below): a
              walkthrough read "0 failed attempts" beside a mail job that failed six times. */}
          <tr>
            <th>fan-out attempts</th>
            <td>{attemptsLine(event)}</td>
          </tr>
          <tr>
            <th>{event.state === "fanned" ? "earlier fan-out error" : "fan-out error"}</th>
            <td class={event.state === "fanned" ? "muted" : "error"}>{event.lastError ?? "–"}</td>
          </tr>
        </Table>
        {backoff ? (
          // What a pending event waits for in an outage: its own line read "0 failed
          // attempts, fan-out error –", with nothing pointing at the relay (the outage walkthrough).
          <p class="error" id="relay-backoff">
            {`The relay is backed off until ${time(backoff.until)} after ${backoff.failures} failed ` +
              `pass${backoff.failures === 1 ? "" : "es"} (${backoff.lastError ?? "no message"}): this event waits ` +
              "for it, uncharged. Once the cause is fixed, “npm run outbox -- relay drain --now” ends the wait."}
          </p>
        ) : null}
        {event.state === "poisoned" ? (
          <form class="actions" method="post" action="/dashboard/poisoned/requeue">
            <input type="hidden" name="id" value={event.id} />
            <input type="hidden" name="back" value="event" />
            <button class="btn" type="submit">
              Requeue this event
            </button>
          </form>
        ) : null}

        <h2>Fan-out</h2>
        {fanout.length === 0 ? (
          <p class="muted">{event.fannedOutAt ? "No subscription matched." : "Not fanned out yet."}</p>
        ) : (
          <Table stack>
            <tr>
              <th>subscription</th>
              <th>job</th>
            </tr>
            {fanout.map(([subscription, entry]) => (
              <tr>
                <td data-label="subscription">{subscription}</td>
                <td class="mono" data-label="job">
                  {"coalescedInto" in entry ? (
                    <>
                      {"coalesced into "}
                      <a href={`/dashboard/events/${entry.coalescedInto}`}>{entry.coalescedInto}</a>
                    </>
                  ) : (
                    `QStash ${entry.messageId}${entry.deduplicated ? " (deduplicated)" : ""}`
                  )}
                  <WaitingNote held={jobsWaiting.find((w) => w.subscription === subscription)} />
                </td>
              </tr>
            ))}
          </Table>
        )}

        {/* Its subscription's one job.failed alert names only the latest event (ADR
            0037): here is where this event's own failures stay in view, to retry. */}
        <h2>Failed jobs</h2>
        {failedJobs.length === 0 ? (
          <p class="muted">No job for this event ran out of retries.</p>
        ) : (
          <JobFailureTable jobs={failedJobs} back={here} ofEvent />
        )}

        <h2>Webhook deliveries</h2>
        <Deliveries deliveries={deliveries} note={webhooksNote} />

        <h2>Payload</h2>
        <Payload json={JSON.stringify(event.payload, null, 2)} id={event.id} />

        <h2>Alerts</h2>
        {shownAlerts.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <Table stack>
            <tr>
              <th>raised</th>
              <th>kind</th>
              <th>message</th>
              <th>resolved</th>
            </tr>
            {shownAlerts.map(({ alert: a, why }) => (
              <tr>
                <td class="time" data-label="raised">
                  {time(a.createdAt)}
                </td>
                <td data-label="kind">{a.kind}</td>
                <td class={a.resolvedAt ? "muted" : "error"} data-label="message">
                  {a.message}
                  {why ? <span class="muted">{` (${why})`}</span> : null}
                </td>
                <td data-label="resolved">
                  {a.resolvedAt ? `${time(a.resolvedAt)}${mergedText(a)}` : "open"}
                </td>
              </tr>
            ))}
          </Table>
        )}
      </>,
    );
  });
}

/** Under a job QStash may still hold: why a mail or an index update has not happened yet. */
function WaitingNote({ held }: { held: JobsWaiting | undefined }) {
  if (!held) return null;
  return <div class="muted">{`may still wait in QStash: ${jobsWaitingText(held, time)}`}</div>;
}

/** Characters of a payload the page shows: an event may carry a megabyte, a page should not. */
export const PAYLOAD_SHOWN = 20_000;

/**
 * A payload box scrolls once it is long: a Tab stop named "payload", so a keyboard
 * scrolls it in every browser (Chromium made an unnamed stop of it on its own).
 */
function PayloadBox({ text }: { text: string }) {
  return (
    <pre tabindex={0} role="region" aria-label="payload">
      {text}
    </pre>
  );
}

function Payload({ json, id }: { json: string; id: string }) {
  if (json.length <= PAYLOAD_SHOWN) return <PayloadBox text={json} />;
  return (
    <>
      <PayloadBox text={`${json.slice(0, PAYLOAD_SHOWN)}…`} />
      <p class="muted">
        {`The first ${PAYLOAD_SHOWN.toLocaleString("en")} of ${json.length.toLocaleString("en")} characters. The whole payload: `}
        <code>{`GET /admin/events/${id}`}</code>
        {" or "}
        <code>{`npm run outbox -- events show ${id} --json`}</code>.
      </p>
    </>
  );
}
