import type { Hono } from "hono";
import { z } from "zod";
import {
  BACKLOG_ALERT_AFTER_MINUTES,
  readWaitLists,
  type WaitListReading,
} from "../../../domain/subscription-backlog.ts";
import { subscriptionFilter } from "../../../domain/subscriptions.ts";
import { readStorage, storageText } from "../../../domain/storage.ts";
import { readSweepRun, retentionText, sweepTrouble } from "../../../domain/sweep-runs.ts";
import { canaryText, canaryView } from "../../../domain/canary.ts";
import { privateUrlsWhereDeployed } from "../../../domain/webhooks/url-safety.ts";
import { listJobFailures } from "../../../domain/job-failures/record.ts";
import { readRetriesDue, retriesDueText } from "../../../domain/job-failures/retries-due.ts";
import { countOpenFailures } from "../../../domain/job-failures/retry.ts";
import { attemptsPerMinute, failedDeliveries } from "../../../domain/webhooks/delivery-log.ts";
import { eventsPerMinute, listAlerts, stats } from "../../../outbox/index.ts";
import { JOB_FAILURE_ID, retryAllOrRefuse, retryOrRefuse } from "../../routes/admin.ts";
import { valid } from "../../validate.ts";
import { LineChart } from "../chart.tsx";
import type { DashboardEnv } from "../env.ts";
import { age, Notice, render, Table, time, Unseen } from "../layout.tsx";
import {
  afterRetry,
  afterRetryAll,
  JobFailureTable,
  retriedAllNotice,
  retriedNotice,
  RetryAll,
} from "./job-failures.tsx";
import { deliveryEventHref } from "./webhook-deliveries.tsx";

/**
 * Seconds between reloads of the overview when asked (`?live=1`): live enough to
 * watch a backlog drain. Asked, not by default: each reload takes a keyboard or
 * screen-reader user back to the top of the page (layout.tsx, Refresh).
 */
export const OVERVIEW_REFRESH_SECONDS = 5;

/** The overview reloading itself: without the one-off notices, which would stay for as long as it runs. */
const LIVE = "/dashboard?live=1";

function Card({ label, value, tone, href }: { label: string; value: string; tone?: string; href?: string }) {
  return (
    <div class={`card ${tone ?? ""}`}>
      <div class="label">{label}</div>
      <div class="value">
        {href ? (
          <a href={href}>
            {/* A link read alone ("3") says what it counts, name first: "1 open alerts" read badly. */}
            <Unseen>{`${label} `}</Unseen>
            {value}
          </a>
        ) : (
          value
        )}
      </div>
    </div>
  );
}

// upTo: the newest failure the page showed; a later one is not retried unseen.
const retryAllForm = z.object({
  upTo: z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  // The job failures page of one subscription: only its failures.
  subscription: subscriptionFilter,
  // The page the button was on (afterRetryAll takes only ours).
  back: z.string().max(100).optional(),
});

/** Waiting at every reading for as long as raises its alert. */
function isBacklogged(w: WaitListReading): boolean {
  return (
    w.waitingSince !== null &&
    w.checkedAt.getTime() - w.waitingSince.getTime() >= BACKLOG_ALERT_AFTER_MINUTES * 60_000
  );
}

/** When the newest of the sweep's wait-list readings was taken; undefined when there is none. */
function newestReading(lists: WaitListReading[]): Date | undefined {
  return lists.reduce<Date | undefined>((at, w) => (at && at >= w.checkedAt ? at : w.checkedAt), undefined);
}

/** "webhook.fanout: 930 waiting (10 at a time, 10 under way) at every reading since …, read at …". */
function waitingLine(w: WaitListReading): string {
  const limit = w.paused
    ? "QStash delivery paused"
    : `${w.parallelism > 0 ? `${w.parallelism} at a time, ` : ""}${w.inFlight} under way`;
  const since =
    w.waitingSince && w.waitingSince < w.checkedAt ? ` at every reading since ${time(w.waitingSince)}` : "";
  return `${w.subscription}: ${w.waiting} waiting (${limit})${since}; read at ${time(w.checkedAt)}`;
}

/** The newest deliveries that gave up, shown on the overview. */
const FAILED_DELIVERIES_SHOWN = 10;

export function registerOverview(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/", async (c) => {
    const { pool, db } = c.var;
    const perMinute = await eventsPerMinute(pool);
    const since = perMinute[0]?.minute ?? new Date(Date.now() - 3_600_000);
    const [s, alerts, jobs, deliveries, attempts, waitLists, sweep, storage, retriesDue, canary] =
      await Promise.all([
        stats(pool),
        listAlerts(pool, { open: true, limit: 10 }),
        listJobFailures(db, { limit: 10 }),
        failedDeliveries(db, FAILED_DELIVERIES_SHOWN),
        attemptsPerMinute(db, since),
        readWaitLists(db),
        readSweepRun(db),
        readStorage(db),
        readRetriesDue(db),
        canaryView(db),
      ]);
    const retrying = retriesDueText(retriesDue, (iso) => time(new Date(iso)));
    const canaryLine = `Jobs from QStash: ${canaryText(canary, time)}.`;
    const sweepProblem = sweepTrouble(sweep, new Date(), time);
    const waiting = waitLists.filter((w) => w.waiting > 0);
    const inQStash = waiting.reduce((n, w) => n + w.waiting, 0);
    const unread = waitLists.find((w) => w.unreadSince !== null);
    // The wait lists are the sweep's readings: while it is late, a 0 in green said all was
    // well from a reading of hours ago.
    const lastRead = sweepProblem?.late ? newestReading(waitLists) : undefined;
    const minutes = perMinute.map((m) => m.minute);
    const attemptAt = new Map(attempts.map((a) => [+a.minute, a]));
    const backingOff = s.relay.backoffUntil !== null && s.relay.backoffUntil > new Date();
    const retried = retriedNotice(jobs, Number(c.req.query("retried")));
    const allParam = c.req.query("retriedAll");
    const retriedAll = allParam && /^\d{1,9}$/.test(allParam) ? Number(allParam) : undefined;
    // Counted up to the newest row shown, as the button retries: a later one is not retried unseen.
    const openFailures = jobs.length === 0 ? 0 : await countOpenFailures(db, { upTo: jobs[0]!.id });
    const live = c.req.query("live") === "1";
    return render(
      c,
      {
        title: "Overview",
        section: "overview",
        refresh: live ? { seconds: OVERVIEW_REFRESH_SECONDS, url: LIVE, stop: "/dashboard" } : undefined,
      },
      <>
        <Notice text={retried ?? retriedAllNotice(retriedAll)} />
        <h1>Overview</h1>
        {live ? null : (
          <p class="live">
            <a href={LIVE}>{`Reload every ${OVERVIEW_REFRESH_SECONDS} s`}</a>
          </p>
        )}
        {privateUrlsWhereDeployed(c.var.config) ? (
          <div class="panel" id="private-urls">
            <p class="error">
              {`WEBHOOK_ALLOW_PRIVATE_URLS=true on a Worker at ${c.var.config.PUBLIC_URL}: webhook endpoints ` +
                "may point at private and loopback addresses over plain http, and each attempt keeps the first 2 KB " +
                "of what they answer. It is meant for a local stack; unset it on a deployed Worker."}
            </p>
          </div>
        ) : null}
        {c.var.config.WEBHOOK_SECRETS_KEY ? null : (
          // Optional so a Worker without webhooks runs, but it keys the sessions too: a
          // deployment without it ran on with nothing saying so (the deploy walkthrough).
          <div class="panel" id="no-secrets-key">
            <p class="error">
              {"WEBHOOK_SECRETS_KEY is not set: dashboard sessions are keyed by ADMIN_TOKEN alone, so a captured " +
                "session cookie lets the token be guessed offline, and webhook endpoints cannot be created. Set it " +
                "(`openssl rand -base64 32`, then `npx wrangler secret put WEBHOOK_SECRETS_KEY`) and keep a copy: " +
                "every session ends, and you sign in again."}
            </p>
          </div>
        )}
        <div class="cards">
          <Card label="Backlog" value={String(s.backlog)} tone={s.backlog > 0 ? "warn" : "ok"} />
          {/* Due, yet nothing runs them before the backoff ends: "Due now 14" read as work under way. */}
          {backingOff && s.due > 0 ? (
            <Card label="Due, relay backed off" value={String(s.due)} tone="warn" />
          ) : (
            <Card label="Due now" value={String(s.due)} />
          )}
          <Card
            label="Oldest pending"
            value={age(s.oldestPendingAgeSeconds)}
            tone={(s.oldestPendingAgeSeconds ?? 0) > 60 ? "bad" : undefined}
          />
          <Card
            label="Poisoned"
            value={String(s.poisoned)}
            tone={s.poisoned > 0 ? "bad" : "ok"}
            href="/dashboard/poisoned"
          />
          <Card
            label="Open alerts"
            value={String(s.openAlerts)}
            tone={s.openAlerts > 0 ? "bad" : "ok"}
            href="/dashboard/alerts"
          />
          <Card
            label="Jobs not retried"
            value={String(openFailures)}
            tone={openFailures > 0 ? "bad" : "ok"}
            href="/dashboard/job-failures"
          />
          <Card
            label="Waiting in QStash"
            value={waitLists.length === 0 ? "–" : String(inQStash)}
            tone={waiting.some(isBacklogged) ? "bad" : inQStash > 0 || unread || lastRead ? "warn" : "ok"}
          />
          <Card
            label="Relay"
            value={s.relay.failures === 0 ? "healthy" : backingOff ? "backing off" : "failing"}
            tone={s.relay.failures === 0 ? "ok" : "bad"}
          />
        </div>
        {s.relay.failures > 0 ? (
          <div class="panel" id="relay">
            <p>
              {`${s.relay.failures} failed pass${s.relay.failures === 1 ? "" : "es"} in a row; `}
              {backingOff ? `no pass before ${time(s.relay.backoffUntil)}.` : "the next pass may run now."}
              {` Last failure ${time(s.relay.lastFailureAt)}:`}
            </p>
            <p class="error">{s.relay.lastError ?? "(no message)"}</p>
          </div>
        ) : null}

        {/* Not a card: the sweep is how the rest is kept, not a count of its own, and
            eight cards fill a row at 1280 px. Red when nothing it does is being done. */}
        {sweepProblem ? (
          <div class="panel" id="sweep">
            <p class={sweepProblem.late ? "error" : undefined}>{sweepProblem.text}</p>
          </div>
        ) : (
          <p class="muted" id="sweep">
            {`Cron sweep finished ${time(sweep!.finishedAt)} in ${sweep!.durationMs} ms; ${retentionText(sweep!.retentionDays)}.`}
          </p>
        )}
        {/* Whether QStash's jobs reach this Worker at all (ADR 0045): red when they do not,
            which no count shows (the jobs were published, and QStash took them). */}
        {canary.late || canary.foreignLabels > 0 ? (
          <div class="panel" id="canary">
            <p class="error">{canaryLine}</p>
          </div>
        ) : (
          <p class="muted" id="canary">
            {canaryLine}
          </p>
        )}
        <p class="muted" id="storage">{`Database: ${storageText(storage)}.`}</p>
        {/* The retry tail: after an outage, what still waits for QStash's next try, which
            no card counts (they are not failures yet). */}
        {retrying ? (
          <div class="panel" id="retries-due">
            <p>{`Failed jobs QStash is to try again, per subscription: ${retrying}. Those that run out of retries show under job failures.`}</p>
          </div>
        ) : null}

        {waiting.length > 0 || unread || lastRead ? (
          <div class="panel" id="waiting">
            {lastRead ? (
              <p class="error">
                {`QStash's wait lists were last read at ${time(lastRead)}, by a sweep; none has finished since, ` +
                  `so QStash may hold ${waiting.length > 0 ? "more or fewer jobs" : "jobs"} now.`}
              </p>
            ) : null}
            {unread ? (
              <p class="error">
                {`The sweep has not read QStash's wait lists since ${time(unread.unreadSince)}: ` +
                  // The reason may end a sentence of its own ("Network connection lost."): one stop.
                  `${(unread.unreadError ?? "no reason given").replace(/\.+$/, "")}. What follows is the last reading.`}
              </p>
            ) : null}
            {waiting.length > 0 ? (
              <>
                <p>Jobs QStash holds back, per subscription, as the sweep read them:</p>
                <ul>
                  {waiting.map((w) => (
                    <li>{waitingLine(w)}</li>
                  ))}
                </ul>
              </>
            ) : (
              <p>None was waiting then.</p>
            )}
          </div>
        ) : null}

        <h2>Events per minute, last hour</h2>
        <LineChart
          title="Events recorded and fanned out per minute"
          minutes={minutes}
          series={[
            { label: "recorded", swatch: "sw-a", values: perMinute.map((m) => m.recorded) },
            { label: "fanned out", swatch: "sw-b", values: perMinute.map((m) => m.fanned) },
          ]}
        />
        <h2>Webhook delivery attempts per minute, last hour</h2>
        <LineChart
          title="Webhook attempts that succeeded and failed per minute"
          minutes={minutes}
          series={[
            {
              label: "succeeded",
              swatch: "sw-b",
              values: minutes.map((m) => attemptAt.get(+m)?.succeeded ?? 0),
            },
            { label: "failed", swatch: "sw-c", values: minutes.map((m) => attemptAt.get(+m)?.failed ?? 0) },
          ]}
        />

        <h2>Open alerts</h2>
        {alerts.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <>
            {s.openAlerts > alerts.length ? (
              <p class="muted">{`The newest ${alerts.length} of ${s.openAlerts}.`}</p>
            ) : null}
            <Table stack>
              <tr>
                <th>raised</th>
                <th>kind</th>
                <th>message</th>
              </tr>
              {alerts.map((a) => (
                <tr>
                  <td class="time" data-label="raised">
                    {time(a.createdAt)}
                  </td>
                  <td data-label="kind">{a.kind}</td>
                  <td class="error" data-label="message">
                    {a.message}
                  </td>
                </tr>
              ))}
            </Table>
            <p>
              <a href="/dashboard/alerts">All open alerts →</a>
            </p>
          </>
        )}

        <h2>Jobs that exhausted their retries</h2>
        {jobs.length > 0 ? <RetryAll upTo={jobs[0]!.id} open={openFailures} /> : null}
        {jobs.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <>
            <JobFailureTable jobs={jobs} />
            <p>
              <a href="/dashboard/job-failures">All job failures →</a>
            </p>
          </>
        )}

        <h2>Webhook deliveries that gave up</h2>
        {deliveries.length === 0 ? (
          <p class="muted">None.</p>
        ) : (
          <Table stack>
            <tr>
              <th>failed</th>
              <th>endpoint</th>
              <th>event</th>
              <th class="num">attempts</th>
              <th>last error</th>
            </tr>
            {deliveries.map((d) => (
              <tr>
                <td class="time" data-label="failed">
                  {time(d.failedAt)}
                </td>
                <td class="mono" data-label="endpoint">
                  <a href={`/dashboard/webhooks/${d.endpointId}`}>{d.endpointUrl}</a>
                </td>
                <td class="mono" data-label="event">
                  <a href={deliveryEventHref(d)}>{d.eventType}</a>
                </td>
                <td class="num" data-label="attempts">
                  {String(d.attempts)}
                </td>
                <td class="error" data-label="last error">
                  {d.lastError ?? "–"}
                </td>
              </tr>
            ))}
          </Table>
        )}
        {deliveries.length > 0 ? (
          // Ten rows with no count and no way on: 234 had failed (the dashboard walkthrough).
          <p>
            {deliveries.length === FAILED_DELIVERIES_SHOWN ? `The newest ${FAILED_DELIVERIES_SHOWN}. ` : ""}
            {"Each endpoint's page counts the deliveries that gave up and sends them again (Recover): "}
            <a href="/dashboard/webhooks">Webhooks →</a>
          </p>
        ) : null}
      </>,
    );
  });

  // Every open failure up to the newest the page showed, as POST /admin/job-failures/retry.
  dashboard.post("/job-failures/retry", valid("form", retryAllForm), async (c) => {
    const form = c.req.valid("form");
    const { retried } = await retryAllOrRefuse(c.var.db, c.var.config, {
      upTo: form.upTo,
      subscription: form.subscription,
    });
    return c.redirect(afterRetryAll(form.back, retried.length), 303);
  });

  // Once per failure; the same use case as POST /admin/job-failures/:id/retry, whose
  // refusals it answers but one: a second post is no second retry, and goes back too.
  // Back to the page the form came from when it says one of ours (never elsewhere), else the overview.
  dashboard.post(`/job-failures/${JOB_FAILURE_ID}/retry`, async (c) => {
    // Retried already (another tab, a resubmitting reload): back to the page, which
    // says how it was retried, rather than a bare 409 (a walkthrough's stale tab).
    const { id } = await retryOrRefuse(c.var.db, c.var.config, Number(c.req.param("id")), {
      retriedAlready: "done",
    });
    const form = await c.req.parseBody();
    return c.redirect(afterRetry(form.back, id), 303);
  });
}
