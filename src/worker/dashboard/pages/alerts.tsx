import type { Hono } from "hono";
import { z } from "zod";
import { idCursor } from "../../../domain/text.ts";
import {
  alertsPage,
  openAlertKinds,
  resolveAlerts,
  isUuid,
  mergedText,
  type AlertRow,
} from "../../../outbox/index.ts";
import { countOpenFailures, stillNotRetried } from "../../../domain/job-failures/retry.ts";
import { isAlertKind, raisedAgainNote } from "../../../domain/alert-kinds.ts";
import { valid } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";
import { asSentence, Confirm, IdLink, Notice, Pager, render, Table, time, Unseen } from "../layout.tsx";
import { jobFailuresHref } from "./job-failures.tsx";

export const resolveForm = z.union([
  // kind: the row's, only for what the notice then says (a kind that is none says nothing).
  z.object({ id: z.coerce.number().int().positive(), kind: z.string().max(200).optional() }),
  // upTo: the newest alert of the kind the page showed; a later one is not resolved unseen.
  z.object({ kind: z.string().min(1).max(200), upTo: z.coerce.number().int().positive() }),
]);

/** Alerts a page of /dashboard/alerts shows; older ones are a link away (it showed 200, then nothing). */
export const ALERTS_PAGE = 100;

const alertsQuery = z.object({
  show: z.enum(["open", "all"]).default("open"),
  resolved: z.coerce.number().int().min(0).optional(),
  // The resolved alert's kind, for what resolving it did not stop; a kind that is none says nothing.
  kind: z.string().max(200).optional(),
  before: idCursor,
});

export function registerAlerts(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/alerts", valid("query", alertsQuery), async (c) => {
    const q = c.req.valid("query");
    const [{ alerts, nextBefore: older }, kinds, owed] = await Promise.all([
      alertsPage(c.var.pool, { open: q.show === "open", before: q.before, limit: ALERTS_PAGE }),
      openAlertKinds(c.var.pool),
      // After a resolve: job failures it did not answer (a resolve sends nothing again).
      q.resolved === undefined ? 0 : countOpenFailures(c.var.db),
    ]);
    const show = q.show === "all" ? "show=all&" : "";
    return render(
      c,
      { title: q.show === "all" ? "Alerts, resolved too" : "Open alerts", section: "alerts" },
      <>
        <h1>Alerts</h1>
        <Notice
          text={
            q.resolved === undefined
              ? undefined
              : `Resolved ${q.resolved} alert${q.resolved === 1 ? "" : "s"}.` +
                (q.resolved > 0 && q.kind !== undefined && isAlertKind(q.kind) ? afterResolve(q.kind) : "") +
                (owed > 0 ? ` ${stillNotRetried(owed)}: retry them on the job failures page.` : "")
          }
        />
        <p>
          {q.show === "open" ? (
            <a href="/dashboard/alerts?show=all">show resolved ones too</a>
          ) : (
            <a href="/dashboard/alerts">show open ones only</a>
          )}
        </p>
        {kinds.length > 0 ? (
          <div class="actions">
            {kinds.map((k) => (
              <div>
                <Confirm
                  label={`Resolve all ${k.kind} (${k.count})`}
                  says={
                    `Marks ${k.count} open ${k.kind} alert${k.count === 1 ? "" : "s"} resolved. Nothing is sent or requeued.` +
                    afterResolve(k.kind)
                  }
                >
                  <form class="inline" method="post" action="/dashboard/alerts/resolve">
                    <input type="hidden" name="kind" value={k.kind} />
                    <input type="hidden" name="upTo" value={String(k.upTo)} />
                    <button class="btn" type="submit">
                      {`Yes, resolve all ${k.count}`}
                    </button>
                  </form>
                </Confirm>
                {k.kind === "event.poisoned" ? (
                  // As for failed jobs: the answer to a poisoned event is a requeue, and
                  // a requeue resolves the alert once none it counts is left (ADR 0044).
                  <span class="muted">
                    {" resolving requeues nothing: "}
                    <a href="/dashboard/poisoned">requeue them on the Poisoned page</a>
                  </span>
                ) : null}
                {k.kind === "job.failed" ? (
                  // Resolving sends nothing again, and retention later deletes a failure
                  // whose alert was resolved: the answer to a failed job is a retry.
                  <span class="muted">
                    {" resolving sends nothing again: "}
                    <a href="/dashboard/job-failures">retry them on the job failures page</a>
                  </span>
                ) : null}
              </div>
            ))}
          </div>
        ) : null}
        {alerts.length === 0 ? (
          <p class="muted">
            {q.before !== undefined
              ? "No older alerts."
              : q.show === "open"
                ? "No open alerts."
                : "No alerts."}
          </p>
        ) : (
          <Table stack>
            <tr>
              <th>raised</th>
              <th>kind</th>
              <th>about</th>
              <th>message</th>
              <th>
                <Unseen>action</Unseen>
              </th>
            </tr>
            {alerts.map((a) => (
              <tr>
                <td class="time" data-label="raised">
                  {time(a.createdAt)}
                </td>
                <td data-label="kind">{a.kind}</td>
                <td class="mono nowrap" data-label="about">
                  <About alert={a} />
                </td>
                {/* A resolved alert is history, not an alarm. */}
                <td class={a.resolvedAt ? "muted" : "error"} data-label="message">
                  {a.message}
                </td>
                <td data-label="action">
                  {a.resolvedAt ? (
                    `resolved ${time(a.resolvedAt)}${mergedText(a)}`
                  ) : (
                    <form method="post" action="/dashboard/alerts/resolve">
                      <input type="hidden" name="id" value={String(a.id)} />
                      <input type="hidden" name="kind" value={a.kind} />
                      <button class="btn secondary" type="submit">
                        Resolve
                        <Unseen>{` alert ${a.id}`}</Unseen>
                      </button>
                    </form>
                  )}
                </td>
              </tr>
            ))}
          </Table>
        )}
        <Pager
          newest={q.before !== undefined ? `/dashboard/alerts${show ? "?show=all" : ""}` : undefined}
          older={older !== null ? `/dashboard/alerts?${show}before=${older}` : undefined}
        />
      </>,
    );
  });

  dashboard.post("/alerts/resolve", valid("form", resolveForm), async (c) => {
    const form = c.req.valid("form");
    const n = await resolveAlerts(
      c.var.pool,
      "id" in form ? { id: form.id } : { kind: form.kind, upTo: form.upTo },
    );
    const kind = "id" in form && form.kind !== undefined ? `&kind=${encodeURIComponent(form.kind)}` : "";
    return c.redirect(`/dashboard/alerts?resolved=${n}${kind}`, 303);
  });
}

/**
 * What resolving alerts of `kind` leaves as it was, as sentences after "Nothing is
 * sent": the sweep raising it again while its condition lasts, a failed delivery
 * still owed. The confirm of a resolve by kind said so; a single row's Resolve said
 * "Resolved 1 alert." and the sweep raised it again 10 s later (the dashboard walkthrough).
 */
function afterResolve(kind: string): string {
  const note = raisedAgainNote(kind);
  const again = note ? ` ${asSentence(note)}` : "";
  if (kind === "webhook.delivery_failed")
    return `${again} The failed deliveries it counts stay failed: Recover on the endpoint's page sends them again.`;
  if (kind === "event.poisoned")
    return `${again} The events it counts stay poisoned: Requeue on the Poisoned page sends them again.`;
  return again;
}

/**
 * What an alert is about, as links: its webhook endpoint (the page to act from) and
 * its event; a subscription's failed jobs, which one alert counts (ADR 0037), are
 * listed, to retry, on the job failures page.
 */
function About({ alert }: { alert: AlertRow }) {
  // A subscription's alerts (its failed jobs, its run of failures) lead to its job
  // failures, which subscription.failing's message names too.
  if ((alert.kind === "job.failed" || alert.kind === "subscription.failing") && alert.subscription)
    return (
      <>
        {`subscription ${alert.subscription}`}
        <br />
        <a href={jobFailuresHref(alert.subscription)}>its failed jobs</a>
      </>
    );
  // A type's poisoned events, which one alert counts (ADR 0044) and names only the
  // latest of: the events page lists them all, each with its error and Requeue.
  const poisonedType = alert.kind === "event.poisoned" ? poisonedTypeOf(alert.details) : undefined;
  if (poisonedType !== undefined && alert.eventId)
    return (
      <>
        <IdLink href={`/dashboard/events/${alert.eventId}`} id={alert.eventId} label="event" />
        <br />
        <a href={`/dashboard/events?${new URLSearchParams({ state: "poisoned", type: poisonedType })}`}>
          {`poisoned ${poisonedType} events`}
        </a>
      </>
    );
  const endpointId = endpointIdOf(alert.details);
  // A subscription's own alert (subscription.failing) is about the subscription.
  if (!endpointId && !alert.eventId)
    return <>{alert.subscription ? `subscription ${alert.subscription}` : "–"}</>;
  return (
    <>
      {endpointId ? (
        <IdLink href={`/dashboard/webhooks/${endpointId}`} id={endpointId} label="endpoint" />
      ) : null}
      {endpointId && alert.eventId ? <br /> : null}
      {alert.eventId ? (
        <IdLink href={`/dashboard/events/${alert.eventId}`} id={alert.eventId} label="event" />
      ) : null}
    </>
  );
}

function poisonedTypeOf(details: unknown): string | undefined {
  const type = (details as { type?: unknown } | null)?.type;
  return typeof type === "string" ? type : undefined;
}

function endpointIdOf(details: unknown): string | undefined {
  const id = (details as { endpointId?: unknown } | null)?.endpointId;
  return typeof id === "string" && isUuid(id) ? id : undefined;
}
