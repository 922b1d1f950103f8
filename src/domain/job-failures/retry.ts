import { and, isNull, sql, type SQL } from "drizzle-orm";
import {
  alerts,
  countedByPoisonedAlert,
  findSubscription,
  parseJobBody,
  publishAdvice,
  PublishError,
  RELAY_POLICY,
  stats,
  type Job,
  type JobBody,
  type Publisher,
  type Queryable,
  type Stats,
  type AlertRow,
} from "../../outbox/index.ts";
import { literal } from "../../outbox/sql.ts";
import { idsSql } from "../../outbox/state.ts";
import type { Db } from "../db.ts";
import { readStorage, type Storage } from "../storage.ts";
import { readRetriesDue, type RetriesDue } from "./retries-due.ts";
import { readWaitLists, type WaitListReading } from "../subscription-backlog.ts";
import { sweepView, type SweepView } from "../sweep-runs.ts";
import { canaryView, type CanaryView } from "../canary.ts";
import { SUBSCRIPTION_NAMES, subscriptions } from "../subscriptions.ts";
import { deliveriesWaiting, type DeliveriesWaiting } from "../webhooks/lag.ts";
import { queryRows, textArray } from "../webhooks/rows.ts";

/**
 * A claim older than this without a message id was abandoned: its request was cut
 * off between the claim and the publish (a publish gives up after
 * RELAY_POLICY.publishTimeoutMs, 15 s, and then undoes its claim). A later retry
 * takes it over rather than be refused for ever.
 */
export const ABANDONED_CLAIM_MS = 60_000;

/**
 * The header a retried job carries to its route (QStash forwards `Upstash-Forward-*`
 * without the prefix): the id of the failure it retries.
 */
export const RETRY_OF_HEADER = "Edge-Outbox-Retry-Of";

/**
 * The route of a retried job answered 200: the retry worked. Marked once, and only
 * on a failure that was retried with this very job: its body (signed) is the
 * failure's, byte for byte (jobToRetry sends the bytes that failed), and its message
 * id (Upstash-Message-Id) is the retry's, or not recorded yet (the publish answered,
 * the id not written back). The failure id comes in a forwarded header, which is not
 * signed: a signed job replayed with another failure's id marked that one delivered,
 * hiding a failure nobody had retried successfully, and the message id is no more
 * signed than it. An id that names no such failure changes nothing. Answers whether
 * a row was marked.
 */
export async function markRetryDelivered(
  db: Db,
  retry: { header: string; messageId: string; body: string },
  at: Date = new Date(),
): Promise<boolean> {
  const { header, messageId, body } = retry;
  // A header is text from a request: only a failure id the database could hold is looked up.
  if (!/^[1-9]\d{0,17}$/.test(header.trim())) return false;
  const rows = await queryRows<{ id: string }>(
    db,
    sql`UPDATE job_failures SET retry_delivered_at = ${at}
         WHERE id = ${header.trim()} AND retried_at IS NOT NULL AND retry_delivered_at IS NULL
           AND (retry_message_id = ${messageId} OR retry_message_id IS NULL) AND body = ${body}
         RETURNING id`,
  );
  return rows.length > 0;
}

/** Why a recorded job failure cannot be retried: each is an answer for the operator, not a fault. */
export type RetryRefusal =
  | { refused: "not_found"; message: string }
  | { refused: "already_retried"; message: string; retriedAt: Date; retryMessageId: string | null }
  | { refused: "not_retryable"; message: string };

export type RetryResult =
  | { retried: true; id: number; retriedAt: Date; retryMessageId: string }
  | ({ retried: false } & RetryRefusal);

/** The columns of a job failure that decide whether it can be retried, and into what. */
export interface RetryableRow {
  id: number;
  messageId: string;
  subscription: string;
  body: string;
}

/**
 * Whether a recorded failure is a job of ours that can be published again as it
 * was: its subscription is in the registry (the failure callback records a whole
 * URL when the job was not sent to one of our routes) and its body is an
 * edge-outbox job for that subscription. Answers the job to publish, or why not.
 * Pure: the dashboard asks it per row to decide whether to offer a Retry button.
 */
export function jobToRetry(row: RetryableRow): { job: Job } | { refused: "not_retryable"; message: string } {
  const refuse = (why: string) => ({
    refused: "not_retryable" as const,
    message: `job failure ${row.id} cannot be retried: ${why}`,
  });
  const subscription = findSubscription(subscriptions, row.subscription);
  if (!subscription) return refuse(`"${row.subscription}" is not one of this app's subscriptions`);
  let body: JobBody;
  try {
    body = parseJobBody(row.body);
  } catch (error) {
    return refuse(messageOf(error));
  }
  // The job route refuses a body naming another subscription (489): it would fail again at once.
  if (body.subscription !== subscription.name) {
    return refuse(`its body is a job for "${body.subscription}", not for "${subscription.name}"`);
  }
  return {
    job: {
      subscription: subscription.name,
      // A fresh id: QStash would drop the original's (or an earlier retry's) as a duplicate.
      deduplicationId: `${row.messageId}:retry-${crypto.randomUUID()}`,
      body,
      // The bytes that failed, exactly: the subscriber gets what it got before.
      json: row.body,
      ...(subscription.retries === undefined ? {} : { retries: subscription.retries }),
      // So its route can say the retry worked (markRetryDelivered) without a lookup per job.
      forward: { [RETRY_OF_HEADER]: String(row.id) },
    },
  };
}

interface FailureRow {
  id: string;
  message_id: string;
  subscription: string;
  body: string;
  retried_at: Date | null;
  retry_message_id: string | null;
}

/**
 * An operator's retry of a job that exhausted its QStash retries: the recorded
 * body, published again to its subscription as a new job (the relay's publisher,
 * its retries and failure callback), once. If it fails again, the failure
 * callback records it as a failure of its own (a new message id), which can be
 * retried in turn.
 *
 * Once per failure, whoever asks: the row is claimed (`retried_at`, compare-and-set)
 * before anything is published, so of two concurrent retries one publishes and the
 * other is refused. If the publish fails, the claim is undone and the error
 * rethrown, as a PublishError, so the operator can ask again. A request cut off
 * between the claim and the publish leaves the row claimed without a message id;
 * after ABANDONED_CLAIM_MS a retry takes that claim over. If the cut-off request's
 * publish did reach QStash, the job then runs twice, as any QStash job may.
 */
export async function retryJobFailure(
  db: Db,
  publisher: Publisher,
  id: number,
  now: Date = new Date(),
): Promise<RetryResult> {
  const row = await readFailure(db, id);
  if (!row) return notFound(id);
  const planned = jobToRetry({
    id,
    messageId: row.message_id,
    subscription: row.subscription,
    body: row.body,
  });
  if ("refused" in planned) return { retried: false, ...planned };
  const [retried] = await publishClaimed(db, publisher, new Map([[id, planned.job]]), now);
  if (!retried) {
    // Retried already, or claimed by another retry since the read (or the row is gone).
    const current = await readFailure(db, id);
    return current?.retried_at ? alreadyRetried(id, current) : notFound(id);
  }
  return { retried: true, id, retriedAt: now, retryMessageId: retried.retryMessageId };
}

async function readFailure(db: Db, id: number): Promise<FailureRow | undefined> {
  const [row] = await queryRows<FailureRow>(
    db,
    sql`SELECT id, message_id, subscription, body, retried_at, retry_message_id
          FROM job_failures WHERE id = ${id}`,
  );
  return row;
}

function notFound(id: number): RetryResult {
  return { retried: false, refused: "not_found", message: `job failure ${id} not found` };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function alreadyRetried(id: number, row: FailureRow): RetryResult {
  const retriedAt = new Date(row.retried_at!);
  return {
    retried: false,
    refused: "already_retried",
    message:
      `job failure ${id} was already retried at ${retriedAt.toISOString()}` +
      (row.retry_message_id ? ` as ${row.retry_message_id}` : " (its publish has not been recorded)"),
    retriedAt,
    retryMessageId: row.retry_message_id,
  };
}

/**
 * One publish of `jobs`, bounded as a relay pass bounds its own
 * (RELAY_POLICY.publishTimeoutMs): an operator's request must end either way, so
 * the claim is kept or undone. Answers the message ids, in order.
 */
async function publishJobs(publisher: Publisher, jobs: Job[]): Promise<string[]> {
  const controller = new AbortController();
  const ms = RELAY_POLICY.publishTimeoutMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const reason = new DOMException(`signal timed out after ${ms} ms`, "TimeoutError");
      controller.abort(reason);
      reject(new PublishError(`publish gave up: ${reason.message}`, "outage", undefined, { cause: reason }));
    }, ms);
  });
  try {
    const published = await Promise.race([publisher.publish(jobs, controller.signal), timedOut]);
    const ids = published.map((p) => p.messageId);
    if (ids.length !== jobs.length || ids.some((id) => !id)) {
      throw new PublishError(
        `the publisher answered ${ids.length} message ids for ${jobs.length} jobs`,
        "outage",
      );
    }
    return ids;
  } catch (error) {
    throw error instanceof PublishError
      ? error
      : new PublishError(`publish failed: ${messageOf(error)}`, "outage", undefined, { cause: error });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What an operator is told when QStash did not take the retry of failure `id`;
 * `advice` is the caller's when it knows more (the CLI, run without QSTASH_URL).
 */
export function notRetriedMessage(
  id: number | string,
  error: PublishError,
  advice = publishAdvice(error),
): string {
  return (
    `QStash did not take the retry of job failure ${id} (${error.message}); ` +
    `the failure is left un-retried: ${advice}`
  );
}

/** Failures one bulk retry publishes at most; the answer says whether more are left. */
export const RETRY_ALL_LIMIT = 1000;

export interface RetryAllResult {
  /** The failures retried now, each with its new job's message id, oldest first. */
  retried: { id: number; retryMessageId: string }[];
  /** Open failures up to `upTo` this call left: past the limit, or claimed by another retry meanwhile. */
  more: boolean;
}

/**
 * After an outage: every failure up to `upTo` (an id the operator saw, so one
 * recorded later is not retried unseen) that is open (never retried, or its retry
 * abandoned) and a job of ours, oldest first, at most `limit`, published again in
 * one publish. Once per failure, as retryJobFailure: the rows are claimed first in
 * one statement (a concurrent retry, single or bulk, gets the others), and a publish
 * that fails undoes every claim of this call and throws, so asking again works.
 * A failure that is not a job of ours is left as it is (the single retry says why).
 */
export async function retryAllJobFailures(
  db: Db,
  publisher: Publisher,
  options: { upTo: number; subscription?: string; limit?: number; now?: Date },
): Promise<RetryAllResult> {
  const now = options.now ?? new Date();
  const limit = options.limit ?? RETRY_ALL_LIMIT;
  const rows = await queryRows<{ id: string; message_id: string; subscription: string; body: string }>(
    db,
    sql`SELECT id, message_id, subscription, body FROM job_failures
         WHERE id <= ${options.upTo} AND ${ofSubscription(options.subscription)} AND ${oursAndOpen(now)}
         ORDER BY id LIMIT ${limit}`,
  );
  const planned = new Map<number, Job>();
  for (const r of rows) {
    const plan = jobToRetry({
      id: Number(r.id),
      messageId: r.message_id,
      subscription: r.subscription,
      body: r.body,
    });
    if ("job" in plan) planned.set(Number(r.id), plan.job);
  }
  if (planned.size === 0) return { retried: [], more: false };
  const retried = await publishClaimed(db, publisher, planned, now);
  return { retried, more: rows.length === limit || retried.length < planned.size };
}

/**
 * The one way a retry happens, single or bulk: claims those of `planned`'s failures
 * still open (one statement, so a concurrent retry gets the others), publishes their
 * jobs in one publish, and records the new message ids; if the publish fails, every
 * claim of this call is undone and the error thrown. Answers the failures retried,
 * oldest first: none when another retry had them all.
 */
async function publishClaimed(
  db: Db,
  publisher: Publisher,
  planned: Map<number, Job>,
  now: Date,
): Promise<{ id: number; retryMessageId: string }[]> {
  const claimed = (
    await queryRows<{ id: string }>(
      db,
      sql`UPDATE job_failures SET retried_at = ${now}
           WHERE id = ANY(${bigintArray([...planned.keys()])}::bigint[]) AND ${openFailure(now)}
       RETURNING id`,
    )
  )
    .map((r) => Number(r.id))
    .sort((a, b) => a - b);
  if (claimed.length === 0) return [];
  let messageIds: string[];
  try {
    messageIds = await publishJobs(
      publisher,
      claimed.map((id) => planned.get(id)!),
    );
  } catch (error) {
    // Only this call's claims: a row touched by anything else since is left alone.
    await db.execute(sql`
      UPDATE job_failures SET retried_at = NULL
       WHERE id = ANY(${bigintArray(claimed)}::bigint[]) AND retried_at = ${now} AND retry_message_id IS NULL`);
    throw error;
  }
  await recordRetries(db, claimed, messageIds);
  return claimed.map((id, i) => ({ id, retryMessageId: messageIds[i]! }));
}

/**
 * Records each retried failure's new message id and, as retrying is the operator's
 * answer to a failed job (as a requeue is to a poisoned event), resolves its
 * subscription's open `job.failed` alert if no failure it counts is still owed:
 * none of the subscription's failures recorded since the alert was raised is
 * waiting for a retry (ADR 0037). Retrying one of forty leaves it open for the
 * others; a retry that fails again raises or joins an open alert of its own.
 *
 * The alerts are locked before the failures are read, in a statement of their own:
 * a failure folding in meanwhile either committed first (and is seen, so the alert
 * stays open) or waits and, finding the alert resolved, raises a new one.
 */
async function recordRetries(db: Db, ids: number[], messageIds: string[]): Promise<void> {
  await db.transaction(async (tx) => {
    const recorded = await queryRows<{ subscription: string }>(
      tx,
      sql`UPDATE job_failures f SET retry_message_id = v.message_id
            FROM unnest(${bigintArray(ids)}::bigint[], ${textArray(messageIds)}::text[]) AS v(id, message_id)
           WHERE f.id = v.id
       RETURNING f.subscription`,
    );
    const open = await queryRows<{ id: string }>(
      tx,
      sql`SELECT id FROM outbox_alerts
           WHERE kind = 'job.failed' AND resolved_at IS NULL
             AND subscription = ANY(${textArray([...new Set(recorded.map((r) => r.subscription))])}::text[])
           ORDER BY id FOR UPDATE`,
    );
    if (open.length === 0) return;
    // Resolved saying how, as subscription.failing does: one resolved by hand with
    // failures still owed read the same as this.
    await tx.execute(sql`
      UPDATE outbox_alerts a
         SET resolved_at = now(), message = a.message || '; resolved: every job it counted was retried',
             details = coalesce(a.details, '{}'::jsonb) || '{"resolvedBy": "retry"}'::jsonb
       WHERE a.id = ANY(${bigintArray(open.map((o) => Number(o.id)))}::bigint[]) AND a.resolved_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM job_failures f
                          WHERE ${countedBy(sql.raw("a"), sql.raw("f"))} AND ${owedFailure(sql.raw("f"))})`);
  });
}

/**
 * The open alerts that count event `eventId` but name another: a `job.failed` alert
 * counting one of its failed jobs, or its type's `event.poisoned` alert counting its
 * poisoning. Each names only the latest event it counts (ADR 0037, 0044), so an
 * earlier event's page read "Alerts: None." while it was counted under a later one
 * (walkthrough). Its views show them beside its own (alertsShownWithEvent).
 */
export function openAlertsCountingEvent(db: Db, eventId: string): Promise<AlertRow[]> {
  return db
    .select()
    .from(alerts)
    .where(
      and(
        isNull(alerts.resolvedAt),
        sql`${alerts.eventId} IS DISTINCT FROM ${eventId}`,
        sql`CASE ${alerts.kind}
              WHEN 'job.failed' THEN EXISTS (
                SELECT 1 FROM job_failures f
                 WHERE f.event_id = ${eventId} AND ${countedBy(sql.raw("outbox_alerts"), sql.raw("f"))})
              WHEN 'event.poisoned' THEN EXISTS (
                SELECT 1 FROM events e
                 WHERE ${sql.raw(idsSql(`ARRAY[${literal(eventId)}]`, "e"))}
                   AND ${sql.raw(countedByPoisonedAlert("outbox_alerts", "e"))})
              ELSE false END`,
      ),
    )
    .orderBy(alerts.id);
}

/** An alert as an event's views show it, and why it is there when the row alone would mislead. */
export interface ShownAlert {
  alert: AlertRow;
  why?: string;
}

/**
 * The alerts an event's page and `events show` list: its own, then those that count
 * one of its failed jobs under a later event (`counting`, openAlertsCountingEvent).
 */
export function alertsShownWithEvent(
  event: { createdAt: Date; alerts: AlertRow[] },
  counting: AlertRow[],
): ShownAlert[] {
  return [
    ...event.alerts.map((alert) => ({
      alert,
      // An endpoint's or a subscription's one alert (ADR 0031, 0037) names its latest
      // failure's event, so it can be older than this event: a walkthrough read it as
      // raised before the event it was about.
      ...(alert.createdAt < event.createdAt
        ? { why: "raised for an earlier failure; this event is its latest" }
        : {}),
    })),
    ...counting.map((alert) => ({
      alert,
      why:
        alert.kind === "event.poisoned"
          ? "counts this event's poisoning; it names the latest"
          : "counts this event's failed job; it names the latest",
    })),
  ];
}

/**
 * Whether failure `f` still waits for an operator's retry: none was published (a
 * retry another request has claimed but not yet recorded counts too; that request
 * resolves the alert itself when it records), and it is a job of ours as far as SQL
 * can tell (oursAndOpen). What keeps a `job.failed` alert open, and what
 * `subscription.failing` counts as owed.
 */
export function owedFailure(f: SQL): SQL {
  return sql`${f}.retry_message_id IS NULL AND ${f}.event_id IS NOT NULL`;
}

/**
 * Whether failure `f` is one that `job.failed` alert `a` counts: its subscription's,
 * recorded since the alert's first failure (the same statement's now() for both,
 * so the first failure is counted). Retention keeps what an open alert counts.
 */
export function countedBy(a: SQL, f: SQL): SQL {
  return sql`${f}.subscription = ${a}.subscription
    AND ${f}.received_at >= coalesce((${a}.details->>'firstFailedAt')::timestamptz, ${a}.created_at)`;
}

/**
 * How many failures a bulk retry would take now (jobs of ours, open), up to `upTo`
 * or all of them, of one subscription or every one: the work still owed after an
 * outage, whether or not anyone has resolved the alerts (the stats show it, so
 * resolving them does not hide it).
 */
export async function countOpenFailures(
  db: Db,
  options: { upTo?: number; subscription?: string; now?: Date } = {},
): Promise<number> {
  const [row] = await queryRows<{ n: number }>(
    db,
    sql`SELECT count(*)::int AS n FROM job_failures
         WHERE ${options.upTo === undefined ? sql`true` : sql`id <= ${options.upTo}`}
           AND ${ofSubscription(options.subscription)} AND ${oursAndOpen(options.now ?? new Date())}`,
  );
  return row?.n ?? 0;
}

/** A bulk retry's or a count's subscription, when it names one: after one subscriber's outage, only its jobs. */
function ofSubscription(subscription: string | undefined): SQL {
  return subscription === undefined ? sql`true` : sql`subscription = ${subscription}`;
}

/**
 * The relay's stats with the job failures not retried yet and each subscription's
 * jobs waiting in QStash as the sweep last read them, as `stats` and GET /admin/stats
 * show them.
 */
export type OperatorStats = Stats & {
  jobFailuresNotRetried: number;
  /** Failed jobs QStash is to try again, per subscription: the retry tail after an outage. */
  jobRetriesDue: RetriesDue[];
  waitLists: WaitListReading[];
  /** Webhook deliveries not attempted yet: queued behind their endpoints' limits, which waitLists do not read. */
  webhookDeliveriesWaiting: DeliveriesWaiting;
  /** The cron sweep's last run and whether it needs looking at (ADR 0040). */
  sweep: SweepView;
  /** Whether jobs reach the Worker, as the sweep's canaries say (ADR 0045). */
  canary: CanaryView;
  /** The database's size and its largest tables: retention deletes rows, and this says what is left. */
  storage: Storage;
};

/**
 * The outbox's stats and the failures still owed, read together: resolving their
 * alerts does not answer them, so the counts an operator checks must not read 0.
 * With them the jobs QStash holds back, which no table of events shows (ADR 0039),
 * and the cron sweep's last run, without which nothing raises the other alerts (ADR 0040).
 */
export async function operatorStats(pool: Queryable, db: Db): Promise<OperatorStats> {
  const [core, notRetried, jobRetriesDue, waitLists, webhookDeliveriesWaiting, sweep, canary, storage] =
    await Promise.all([
      stats(pool),
      countOpenFailures(db),
      readRetriesDue(db),
      readWaitLists(db),
      deliveriesWaiting(db),
      sweepView(db),
      canaryView(db),
      readStorage(db),
    ]);
  return {
    ...core,
    jobFailuresNotRetried: notRetried,
    jobRetriesDue,
    waitLists,
    webhookDeliveriesWaiting,
    sweep,
    canary,
    storage,
  };
}

/** "5 job failures are still not retried", said after a resolve that answered none of them. */
export function stillNotRetried(owed: number): string {
  return `${owed} job failure${owed === 1 ? " is" : "s are"} still not retried`;
}

/**
 * Open failures that can be jobs of ours, as far as SQL can tell without reading
 * bodies: the subscription is in the registry, and the failure has an event id,
 * which the recording takes from the body only when it names a uuid event, as
 * every job body does (jobToRetry, on the body, has the last word). Without the
 * second test, failures whose body is not a job (QStash deliveries that were never
 * ours) were counted by the overview's "Retry all" for ever, and took the places of
 * retryable ones in a bulk retry's 1,000.
 */
function oursAndOpen(now: Date): SQL {
  return sql`subscription = ANY(${subscriptionNames()}::text[]) AND event_id IS NOT NULL AND ${openFailure(now)}`;
}

function subscriptionNames(): string {
  return textArray(SUBSCRIPTION_NAMES);
}

/** Never retried, or claimed by a retry that did not finish within ABANDONED_CLAIM_MS. */
function openFailure(now: Date): SQL {
  const abandonedBefore = new Date(now.getTime() - ABANDONED_CLAIM_MS);
  return sql`(retried_at IS NULL OR (retry_message_id IS NULL AND retried_at < ${abandonedBefore}))`;
}

/** openFailure for a row already read (the dashboard's choice of a Retry button); the claim decides. */
export function isOpenFailure(
  f: { retriedAt: Date | null; retryMessageId: string | null },
  now: Date,
): boolean {
  return (
    f.retriedAt === null ||
    (f.retryMessageId === null && f.retriedAt.getTime() < now.getTime() - ABANDONED_CLAIM_MS)
  );
}

/** Job failure ids (bigint identities) as one array literal for `$n::bigint[]`. */
function bigintArray(ids: readonly number[]): string {
  return `{${ids.join(",")}}`;
}
