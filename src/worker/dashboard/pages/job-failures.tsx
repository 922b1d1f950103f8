import type { Hono } from "hono";
import { z } from "zod";
import { idCursor } from "../../../domain/text.ts";
import { jobFailuresPage, lastAnswerOf, type JobFailureRow } from "../../../domain/job-failures/record.ts";
import {
  countOpenFailures,
  isOpenFailure,
  jobToRetry,
  RETRY_ALL_LIMIT,
} from "../../../domain/job-failures/retry.ts";
import { IDENTITY_ID_DIGITS, SUBSCRIPTION_NAME, UUID_PATTERN } from "../../../outbox/index.ts";
import { SUBSCRIPTION_NAMES, subscriptionFilter } from "../../../domain/subscriptions.ts";
import { valid } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";
import { Confirm, IdLink, Notice, Pager, render, Table, time, Unseen } from "../layout.tsx";

/** Job failures a page of /dashboard/job-failures shows. */
export const JOB_FAILURES_PAGE = 50;

const jobFailuresQuery = z.object({
  subscription: subscriptionFilter,
  before: idCursor,
  retried: z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER).optional(),
  retriedAll: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
});

/**
 * The pages a retry may go back to: this page, newest or older, of every subscription
 * or of one (jobFailuresHref), and an event's page, which lists the event's failed
 * jobs. Anything else goes to the overview.
 */
const RETURNABLE = new RegExp(
  `^/dashboard/job-failures(\\?subscription=${SUBSCRIPTION_NAME}(&before=${IDENTITY_ID_DIGITS})?|\\?before=${IDENTITY_ID_DIGITS})?$` +
    `|^/dashboard/events/${UUID_PATTERN}$`,
);

/** Where "Retry all" may go back to: the newest page, of every subscription or of one. */
const RETURNABLE_AFTER_ALL = new RegExp(`^/dashboard/job-failures(\\?subscription=${SUBSCRIPTION_NAME})?$`);

/** The job failures page, of one subscription or every one, from `before` back. */
export function jobFailuresHref(subscription?: string, before?: number): string {
  const query = new URLSearchParams();
  if (subscription !== undefined) query.set("subscription", subscription);
  if (before !== undefined) query.set("before", String(before));
  const text = query.toString();
  return `/dashboard/job-failures${text ? `?${text}` : ""}`;
}

/** Where a retry of failure `id` sends the browser: back to the page it came from, if it is one of ours. */
export function afterRetry(back: unknown, id: number): string {
  if (typeof back === "string" && RETURNABLE.test(back)) {
    return `${back}${back.includes("?") ? "&" : "?"}retried=${id}`;
  }
  return `/dashboard?retried=${id}`;
}

/** Where a Retry all sends the browser: this page when it came from there, else the overview. */
export function afterRetryAll(back: unknown, retried: number): string {
  const page = typeof back === "string" && RETURNABLE_AFTER_ALL.test(back) ? back : "/dashboard";
  return `${page}${page.includes("?") ? "&" : "?"}retriedAll=${retried}`;
}

/** After a Retry all: how many it took, or that another retry had taken them. */
export function retriedAllNotice(retriedAll: number | undefined): string | undefined {
  if (retriedAll === undefined) return undefined;
  if (retriedAll === 0)
    return "No job failure was left to retry: another retry (a second press, another tab, the CLI) had taken them.";
  return `Retried ${retriedAll} job failure${retriedAll === 1 ? "" : "s"}: each is a new job in QStash.`;
}

/**
 * The Retry all button, on the overview and on the first page of job failures: every
 * open failure up to the newest the page shows (`upTo`), so one recorded later is
 * not retried unseen, of the page's subscription when it shows one. Nothing when none
 * is open.
 */
export function RetryAll({
  upTo,
  open,
  back,
  subscription,
}: {
  upTo: number;
  open: number;
  back?: string;
  subscription?: string | undefined;
}) {
  if (open === 0) return null;
  const of = subscription === undefined ? "" : ` of ${subscription}`;
  return (
    <div class="actions">
      <Confirm
        label={`Retry all ${open}${of} not yet retried`}
        says={`Publishes ${open} job${open === 1 ? "" : "s"}${of} to QStash again, each a new job its subscriber runs again.`}
      >
        <form method="post" action="/dashboard/job-failures/retry">
          <input type="hidden" name="upTo" value={String(upTo)} />
          {subscription === undefined ? null : (
            <input type="hidden" name="subscription" value={subscription} />
          )}
          {back ? <input type="hidden" name="back" value={back} /> : null}
          <button class="btn" type="submit">
            {`Yes, retry all ${open}`}
          </button>
        </form>
      </Confirm>
      <span class="muted">{`up to the newest shown, ${RETRY_ALL_LIMIT.toLocaleString("en")} a press`}</span>
    </div>
  );
}

/** After a retry: said from the row itself, so a link cannot put words on the page. */
export function retriedNotice(jobs: JobFailureRow[], retriedId: number | undefined): string | undefined {
  const retried = jobs.find((f) => f.id === retriedId && f.retryMessageId !== null);
  return retried
    ? `Job failure ${retried.id} retried: QStash took a new job, ${retried.retryMessageId}.`
    : undefined;
}

/**
 * What the dashboard offers for a job failure, as its table cell: its retry, once it
 * was made; a Retry button while it can be made; or why it cannot (not a job of ours).
 * A retry's times never break and its message id keeps a `td.id`'s width.
 */
function RetryCell({ failure: f, back }: { failure: JobFailureRow; back?: string }) {
  const open = isOpenFailure(f, new Date());
  if (f.retriedAt && !open) {
    return (
      <td class="id" data-label="retry">
        {"retried "}
        <span class="nowrap">{time(f.retriedAt)}</span>
        {" as "}
        {f.retryMessageId ? <span class="mono">{f.retryMessageId}</span> : "(publish not recorded)"}
        {"; "}
        <RetryOutcome failure={f} />
      </td>
    );
  }
  const planned = jobToRetry(f);
  if ("refused" in planned) {
    return (
      <td
        class="muted"
        data-label="retry"
      >{`not retryable: ${planned.message.replace(/^job failure \d+ cannot be retried: /, "")}`}</td>
    );
  }
  return (
    <td data-label="retry">
      <form class="inline" method="post" action={`/dashboard/job-failures/${f.id}/retry`}>
        {back ? <input type="hidden" name="back" value={back} /> : null}
        <button class="btn secondary small" type="submit">
          {f.retriedAt ? "Retry (the last one did not finish)" : "Retry"}
          {/* Ten rows, ten "Retry": a screen reader's list of buttons says which. */}
          <Unseen>{` job failure ${f.id}`}</Unseen>
        </button>
      </form>
    </td>
  );
}

/**
 * How a retry went, as far as we know: its job's route took it, or it ran out of
 * retries too (a failure of its own), or neither yet (QStash is still trying).
 */
function RetryOutcome({
  failure: f,
}: {
  failure: Pick<JobFailureRow, "retryDeliveredAt" | "failedAgainId">;
}) {
  if (!f.retryDeliveredAt && f.failedAgainId === null) return <>not delivered yet</>;
  return (
    <>
      {f.retryDeliveredAt ? (
        <>
          {"delivered "}
          <span class="nowrap">{time(f.retryDeliveredAt)}</span>
        </>
      ) : null}
      {f.retryDeliveredAt && f.failedAgainId !== null ? "; " : null}
      {f.failedAgainId === null ? null : `failed again: #${f.failedAgainId}`}
    </>
  );
}

/** Characters of a job route's last answer shown in the table; the admin API has all of it. */
const ANSWER_SHOWN = 120;

/**
 * Jobs that exhausted their retries, as the overview and /dashboard/job-failures show
 * them. `back`: the page a Retry returns to (the overview when absent).
 */
export function JobFailureTable({
  jobs,
  back,
  ofEvent = false,
  ofSubscription = false,
}: {
  jobs: JobFailureRow[];
  back?: string;
  /** On an event's own page: no event column, whose every link is that page. */
  ofEvent?: boolean;
  /** On one subscription's page: no subscription column, the page's title says it (and a phone has the width back). */
  ofSubscription?: boolean;
}) {
  return (
    <Table stack>
      <tr>
        <th>#</th>
        <th>received</th>
        {ofSubscription ? null : <th>subscription</th>}
        {ofEvent ? null : <th>event</th>}
        <th>last answer</th>
        <th>QStash message</th>
        <th>retry</th>
      </tr>
      {jobs.map((f) => (
        <tr>
          <td data-label="#">{f.retryOfId === null ? `#${f.id}` : `#${f.id} (retry of #${f.retryOfId})`}</td>
          <td class="time" data-label="received">
            {time(f.receivedAt)}
          </td>
          {ofSubscription ? null : <td data-label="subscription">{f.subscription}</td>}
          {ofEvent ? null : (
            <td class="mono nowrap" data-label="event">
              {f.eventId ? <IdLink href={`/dashboard/events/${f.eventId}`} id={f.eventId} /> : "–"}
            </td>
          )}
          <td class="error" data-label="last answer">
            {lastAnswerOf(f, ANSWER_SHOWN)}
          </td>
          <td class="mono id" data-label="QStash message">
            {f.messageId}
          </td>
          <RetryCell failure={f} back={back} />
        </tr>
      ))}
    </Table>
  );
}

export function registerJobFailures(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/job-failures", valid("query", jobFailuresQuery), async (c) => {
    const q = c.req.valid("query");
    const subscription = q.subscription;
    const { jobFailures: jobs, nextBefore: older } = await jobFailuresPage(c.var.db, {
      before: q.before,
      limit: JOB_FAILURES_PAGE,
      subscription,
    });
    const here = jobFailuresHref(subscription, q.before);
    // Offered on the newest page, as on the overview: where "All job failures" leads.
    const newest = q.before === undefined ? jobs[0]?.id : undefined;
    const open = newest === undefined ? 0 : await countOpenFailures(c.var.db, { upTo: newest, subscription });
    return render(
      c,
      {
        title: subscription === undefined ? "Job failures" : `Job failures of ${subscription}`,
        section: "job-failures",
      },
      <>
        <Notice text={retriedNotice(jobs, q.retried) ?? retriedAllNotice(q.retriedAll)} />
        <h1>{subscription === undefined ? "Job failures" : `Job failures of ${subscription}`}</h1>
        <p class="muted">Jobs that exhausted their retries, newest first.</p>
        <SubscriptionLinks current={subscription} />
        {newest === undefined ? null : (
          <RetryAll
            upTo={newest}
            open={open}
            back={jobFailuresHref(subscription)}
            subscription={subscription}
          />
        )}
        {jobs.length === 0 ? (
          <p class="muted">{q.before === undefined ? "None." : "No older job failures."}</p>
        ) : (
          <JobFailureTable jobs={jobs} back={here} ofSubscription={subscription !== undefined} />
        )}
        <Pager
          newest={q.before !== undefined ? jobFailuresHref(subscription) : undefined}
          older={older !== null ? jobFailuresHref(subscription, older) : undefined}
        />
      </>,
    );
  });
}

/**
 * Which subscription's failures the page lists: after one subscriber's outage, its
 * failures alone, and a Retry all that sends only its jobs again.
 */
function SubscriptionLinks({ current }: { current: string | undefined }) {
  const choices: [string | undefined, string][] = [
    [undefined, "every subscription"],
    ...SUBSCRIPTION_NAMES.map((name): [string, string] => [name, name]),
  ];
  return (
    <nav class="filters" aria-label="Subscription">
      {"Of: "}
      {choices.map(([name, label], i) => (
        <>
          {i > 0 ? " · " : null}
          {name === current ? (
            <strong aria-current="page">{label}</strong>
          ) : (
            <a href={jobFailuresHref(name)}>{label}</a>
          )}
        </>
      ))}
    </nav>
  );
}
