import { inArray, sql } from "drizzle-orm";
import { qstashGet, subscriptionFlowControl, withCause, type Fanout } from "../outbox/index.ts";
import type { Db } from "./db.ts";
import { subscriptionWaitLists } from "./schema.ts";
import { SUBSCRIPTION_NAMES, WEBHOOK_FANOUT } from "./subscriptions.ts";
import { isoTime, queryRows, textArray, utcText } from "./webhooks/rows.ts";

/**
 * Minutes a subscription's QStash wait list must stay non-empty, at every reading,
 * before the sweep raises `subscription.backlogged` (ADR 0039).
 */
export const BACKLOG_ALERT_AFTER_MINUTES = 15;

/** How long the sweep waits for QStash's answers about the wait lists. */
export const WAIT_LIST_TIMEOUT_MS = 10_000;

/** One flow-control key's wait list, as QStash reports it. */
export interface WaitList {
  /** Jobs due but not started: held by the key's parallelism (or rate, or a pause). */
  waiting: number;
  /** The key's parallelism (0 when it has none). */
  parallelism: number;
  /** Jobs under way. */
  inFlight: number;
  paused: boolean;
}

/** QStash's flow-control keys, read one at a time. */
export interface WaitLists {
  /** The key's wait list, or null when QStash knows no such key (no job has had it lately). */
  get(key: string): Promise<WaitList | null>;
}

/**
 * `GET /v2/flowControl/<key>` (QStash's get-flow-control-key), through qstashGet:
 * the SDK logs every 404 as an error, and a subscription with no job lately is a 404
 * at every sweep.
 */
export function createQStashWaitLists(options: {
  baseUrl: string;
  token: string;
  timeoutMs?: number;
}): WaitLists {
  const read = { ...options, timeoutMs: options.timeoutMs ?? WAIT_LIST_TIMEOUT_MS };
  return {
    async get(key) {
      const info = (await qstashGet(read, `/v2/flowControl/${encodeURIComponent(key)}`)) as {
        waitListSize?: number;
        // Upstash's OpenAPI schema for the list spells it so; the SDK and the get docs do not.
        waitlistSize?: number;
        parallelismMax?: number;
        parallelismCount?: number;
        isPaused?: boolean;
      } | null;
      if (info === null) return null;
      return {
        waiting: info.waitListSize ?? info.waitlistSize ?? 0,
        parallelism: info.parallelismMax ?? 0,
        inFlight: info.parallelismCount ?? 0,
        paused: info.isPaused ?? false,
      };
    },
  };
}

/** What one sweep's reading of the wait lists found. */
export interface BacklogCheck {
  /** Jobs waiting in QStash per subscription; empty when QStash could not be read. */
  waiting: Record<string, number>;
  /** Subscriptions backlogged now, each with its one open alert. */
  backlogged: number;
  /** Those whose alert this check raised. */
  raised: string[];
  /** Those whose alert this check resolved: their wait list was empty. */
  caughtUp: string[];
  /** Why QStash could not be read; the readings were then only marked unread since now. */
  unreadable?: string;
}

/**
 * The cron sweep's watch on jobs QStash holds back. Every subscription's jobs share
 * one flow-control key (subscriptionFlowControl), so a subscription that cannot keep
 * up (a slow handler, a burst of events, a parallelism set too low) leaves its jobs
 * in that key's wait list: accepted by QStash, due, not run. The database sees none
 * of it: the events are fanned out, no job failed, and a walkthrough's ~93,000
 * `webhook.fanout` jobs made new notes' webhooks 8–9 minutes late while every view
 * read healthy. So the sweep reads each subscription's wait list, keeps it in
 * `subscription_wait_lists` (`stats`, /admin/stats and the overview show it), and raises one
 * `subscription.backlogged` alert per subscription whose wait list has been non-empty
 * at every reading for `afterMinutes`; the first sweep that finds it empty resolves
 * the alert. Sweeps a minute apart sample nearly independent moments of a busy but
 * sufficient key, whose wait list is empty at most of them (ADR 0039), so fifteen
 * in a row means it does not keep up.
 *
 * QStash unreachable (or slower than WAIT_LIST_TIMEOUT_MS): the readings stay, marked
 * unread since then and why, and no alert changes; the next sweep reads again. A run
 * of non-empty readings goes on across such a gap ("at every reading since").
 */
export async function evaluateBacklogs(
  db: Db,
  waitLists: WaitLists,
  options: {
    publicUrl: string;
    now: Date;
    afterMinutes?: number;
  },
): Promise<BacklogCheck> {
  const names = SUBSCRIPTION_NAMES;
  let lists: (WaitList | null)[];
  try {
    lists = await Promise.all(
      // The key does not depend on the parallelism: any value names the same one.
      names.map((name) => waitLists.get(subscriptionFlowControl(options.publicUrl, name, 1).key)),
    );
  } catch (error) {
    const why = withCause(error);
    // The readings stay as they were, marked as that old: the views said "300 waiting"
    // for as long as QStash could not be asked, with nothing but the time to tell.
    await db.execute(sql`UPDATE subscription_wait_lists
                            SET unread_since = coalesce(unread_since, ${options.now}::timestamptz),
                                unread_error = ${why.slice(0, 500)}`);
    return { waiting: {}, backlogged: 0, raised: [], caughtUp: [], unreadable: why };
  }
  const read = lists.map((l) => l ?? { waiting: 0, parallelism: 0, inFlight: 0, paused: false });
  const after = options.afterMinutes ?? BACKLOG_ALERT_AFTER_MINUTES;
  const now = sql`${options.now}::timestamptz`;
  const column = (pick: (l: WaitList) => number | boolean) => textArray(read.map((l) => String(pick(l))));

  const [row] = await queryRows<{ backlogged: number; raised: string[]; caught_up: string[] }>(
    db,
    sql`WITH reading AS (
          SELECT * FROM unnest(${textArray(names)}::text[], ${column((l) => l.waiting)}::int[],
                               ${column((l) => l.parallelism)}::int[], ${column((l) => l.inFlight)}::int[],
                               ${column((l) => l.paused)}::boolean[])
                 AS r(subscription, waiting, parallelism, in_flight, paused)
        ),
        sampled AS (
          -- A run of non-empty readings keeps the time it began; an empty one ends it.
          INSERT INTO subscription_wait_lists AS w
                 (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
          SELECT subscription, waiting, parallelism, in_flight, paused,
                 CASE WHEN waiting > 0 THEN ${now} END, ${now}
            FROM reading
          ON CONFLICT (subscription) DO UPDATE SET
            waiting = EXCLUDED.waiting, parallelism = EXCLUDED.parallelism,
            in_flight = EXCLUDED.in_flight, paused = EXCLUDED.paused, checked_at = EXCLUDED.checked_at,
            unread_since = NULL, unread_error = NULL,
            waiting_since = CASE WHEN EXCLUDED.waiting = 0 THEN NULL
                                 ELSE coalesce(w.waiting_since, EXCLUDED.waiting_since) END
          RETURNING w.*
        ),
        behind AS (
          SELECT s.subscription,
                 -- A pause is said first: it, not the limit, holds every job back.
                 CASE WHEN s.paused
                 THEN format('subscription %s is held: QStash delivery of its jobs is paused, and at %s %s of them '
                             'waited, some at every reading since %s (over %s min); resume delivery in QStash',
                             s.subscription, ${utcText(sql`s.checked_at`)}, s.waiting,
                             ${utcText(sql`s.waiting_since`)}, ${after}::int)
                 ELSE format('subscription %s is behind: at %s, %s of its jobs waited in QStash behind its '
                             'flow-control limit (%s), some at every reading since %s (over %s min), so its events '
                             'reach it late: its handler may be slow, or its events more than it can take %s at a time',
                             s.subscription, ${utcText(sql`s.checked_at`)}, s.waiting,
                             CASE WHEN s.parallelism > 0
                                  THEN s.parallelism || ' at a time, ' || s.in_flight || ' under way'
                                  ELSE s.in_flight || ' under way' END,
                             ${utcText(sql`s.waiting_since`)}, ${after}::int,
                             CASE WHEN s.parallelism > 0 THEN s.parallelism::text ELSE 'so many' END) END AS message,
                 jsonb_build_object('waiting', s.waiting, 'parallelism', s.parallelism,
                                    'inFlight', s.in_flight, 'paused', s.paused,
                                    'waitingSince', ${isoTime(sql`s.waiting_since`)},
                                    'checkedAt', ${isoTime(sql`s.checked_at`)}) AS details
            FROM sampled s
           WHERE s.waiting_since <= ${now} - make_interval(mins => ${after})
        ),
        updated AS (
          UPDATE outbox_alerts a SET message = b.message, details = b.details
            FROM behind b
           WHERE a.kind = 'subscription.backlogged' AND a.resolved_at IS NULL AND a.subscription = b.subscription
          RETURNING b.subscription
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, subscription, message, details)
          SELECT 'subscription.backlogged', subscription, message, details
            FROM behind WHERE subscription NOT IN (SELECT subscription FROM updated)
          ON CONFLICT (subscription) WHERE resolved_at IS NULL AND kind = 'subscription.backlogged'
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING subscription, xmax = 0 AS new
        ),
        cleared AS (
          -- Only an empty reading ends it (a subscription no longer ours too): a run
          -- that has not lasted long enough yet leaves an open alert as it was.
          UPDATE outbox_alerts a SET resolved_at = now(),
                 message = format('subscription %s caught up: QStash held none of its jobs waiting at %s '
                                  '(some had waited at every reading since %s)',
                                  a.subscription, ${utcText(now)},
                                  ${utcText(sql`(a.details->>'waitingSince')::timestamptz`)})
           WHERE a.kind = 'subscription.backlogged' AND a.resolved_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM sampled s WHERE s.subscription = a.subscription AND s.waiting > 0)
          RETURNING a.subscription
        )
        SELECT (SELECT count(*)::int FROM behind) AS backlogged,
               ARRAY(SELECT subscription FROM raised WHERE new ORDER BY subscription) AS raised,
               ARRAY(SELECT subscription FROM cleared ORDER BY subscription) AS caught_up`,
  );
  return {
    waiting: Object.fromEntries(names.map((name, i) => [name, read[i]!.waiting])),
    backlogged: row?.backlogged ?? 0,
    raised: row?.raised ?? [],
    caughtUp: row?.caught_up ?? [],
  };
}

/** A subscription's wait list as the sweep last read it (a `subscription_wait_lists` row). */
export type WaitListReading = typeof subscriptionWaitLists.$inferSelect;

/** The sweep's last reading of each subscription's wait list, by name; none before its first. */
export async function readWaitLists(db: Db): Promise<WaitListReading[]> {
  return db
    .select()
    .from(subscriptionWaitLists)
    .where(inArray(subscriptionWaitLists.subscription, SUBSCRIPTION_NAMES))
    .orderBy(subscriptionWaitLists.subscription);
}

/**
 * "webhook.fanout 93012 waiting at every reading since 2026-…Z": the readings with
 * jobs waiting, for a status line; undefined when none has.
 */
export function describeWaiting(readings: readonly WaitListReading[]): string | undefined {
  const waiting = readings.filter((r) => r.waiting > 0);
  if (waiting.length === 0) return undefined;
  return waiting
    .map(
      (r) =>
        `${r.subscription} ${r.waiting} waiting` +
        (r.paused ? " (QStash delivery paused)" : "") +
        (r.waitingSince ? ` at every reading since ${r.waitingSince.toISOString()}` : ""),
    )
    .join("; ");
}

/** One of an event's subscriptions whose QStash wait list held jobs when the sweep read it. */
export interface JobsWaiting {
  subscription: string;
  waiting: number;
  paused: boolean;
  checkedAt: Date;
}

/**
 * The subscriptions an event's fan-out sent a job to whose wait list held jobs when
 * the sweep read QStash after that (so its job may be one of them). A job that ran
 * leaves no row, so this is as near as the database gets to "not run yet": a
 * notify.mail job held behind its limit explains a mail not sent, as the webhook
 * note explained missing deliveries and nothing explained the rest.
 */
export function jobsWaitingFor(
  event: { fannedOutAt: Date | null; fanout: Fanout | null },
  readings: readonly WaitListReading[],
  /**
   * What shows the event's jobs ran: its job failures (each a run that failed) and
   * its webhook deliveries (webhook.fanout's work). A reading older than that run
   * said "may still wait" of a job already listed as failed (the re-check walkthrough).
   */
  ran: { jobFailures: readonly { subscription: string }[]; webhookDeliveries: number },
): JobsWaiting[] {
  const fannedOutAt = event.fannedOutAt;
  if (fannedOutAt === null || event.fanout === null) return [];
  const done = new Set(ran.jobFailures.map((f) => f.subscription));
  if (ran.webhookDeliveries > 0) done.add(WEBHOOK_FANOUT);
  const sent = new Set(
    Object.entries(event.fanout)
      .filter(([subscription, entry]) => "messageId" in entry && !done.has(subscription))
      .map(([subscription]) => subscription),
  );
  return readings
    .filter((r) => sent.has(r.subscription) && r.waiting > 0 && r.checkedAt >= fannedOutAt)
    .map(({ subscription, waiting, paused, checkedAt }) => ({ subscription, waiting, paused, checkedAt }));
}

/**
 * "12 notify.mail jobs waited behind their flow-control limit when the sweep read
 * QStash at …", in the caller's way of writing a time.
 */
export function jobsWaitingText(w: JobsWaiting, time: (d: Date) => string = (d) => d.toISOString()): string {
  const jobs = `${w.waiting} ${w.subscription} job${w.waiting === 1 ? "" : "s"}`;
  const held = w.paused ? `waited with QStash delivery paused` : `waited behind their flow-control limit`;
  return `${jobs} ${held} when the sweep read QStash at ${time(w.checkedAt)}`;
}
