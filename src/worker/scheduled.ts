import {
  deleteOldFannedEvents,
  drain,
  evaluateAlerts,
  vacuumEventsIfNeeded,
  withCause,
  type DrainResult,
} from "../outbox/index.ts";
import { sendAlertNotice, type AlertNoticeResult } from "../domain/alert-notices.ts";
import { checkCanary, type CanaryCheck } from "../domain/canary.ts";
import { collectDeadLetters } from "../domain/job-failures/dead-letters.ts";
import { deleteExpiredKeys, IDEMPOTENCY_KEY_HOURS } from "../domain/idempotency.ts";
import { evaluateFailingSubscriptions } from "../domain/job-failures/failing.ts";
import { deleteOldRecords } from "../domain/retention.ts";
import { evaluateBacklogs, type BacklogCheck } from "../domain/subscription-backlog.ts";
import { subscriptions } from "../domain/subscriptions.ts";
import { recordSweepFailed, recordSweepFinished } from "../domain/sweep-runs.ts";
import { disableFailingEndpoints } from "../domain/webhooks/auto-disable.ts";
import { evaluateEndpointLag, evaluateFailingEndpoints } from "../domain/webhooks/lag.ts";
import {
  deleteOldDeliveries,
  OVERDUE_AFTER_MINUTES,
  publishOverdue,
  publishUnpublished,
} from "../domain/webhooks/sweep.ts";
import { deleteStaleLoginFailures } from "./dashboard/lockout.ts";
import { openNeonDatabase, type OpenDatabase } from "./database.ts";
import { loggable } from "./errors.ts";
import { parseConfig, qstashLabelFor, type Bindings } from "./env.ts";
import { passBackoffFor, publisherFor, SWEEP_BUDGET_MS } from "./relay.ts";
import {
  canaryQueueFor,
  deadLettersFor,
  deliverQueueFor,
  qstashMessagesFor,
  waitListsFor,
} from "./webhooks.ts";

/**
 * The every-minute cron sweep (wrangler.toml `crons`). It is what makes a lost
 * kick harmless: relay passes until nothing is claimable or the budget is spent,
 * then maintenance — retention in bounded deletes, a VACUUM of `events` once
 * enough of it is dead, alert evaluation, disabling webhook endpoints that have
 * only failed for WEBHOOK_DISABLE_AFTER_DAYS, raising (and resolving) an alert
 * for each endpoint that does not keep up with its deliveries and each subscription
 * whose jobs keep failing while QStash retries them, deleting finished webhook
 * deliveries, resolved alerts, settled job failures and mail records past
 * RETENTION_DAYS, idempotency keys past IDEMPOTENCY_KEY_HOURS and wrong dashboard
 * sign-ins the lock-out no longer reads, and, last because they need QStash (whose
 * outage should not stop the rest), recording the jobs QStash dead-lettered
 * without reaching our failure callback, publishing deliveries whose publish
 * was lost or whose job is long overdue, and reading each subscription's wait list
 * in QStash (an alert for one that stays behind, ADR 0039), and sending the canary
 * job that tells whether QStash's jobs reach this Worker at all (ADR 0045), and, with
 * ALERT_WEBHOOK_URL set, posting the open alerts not told of yet (ADR 0046). One log line
 * says what it did, and `sweep_runs` when it finished or failed (ADR 0040). Throws (the invocation shows as failed) on misconfiguration
 * or a database error; the next sweep simply tries again.
 */
export function createScheduled(
  open: OpenDatabase = openNeonDatabase,
  /** The sweep's clock for webhook auto-disable; tests move it instead of waiting days. */
  now: () => Date = () => new Date(),
): ExportedHandlerScheduledHandler<Bindings> {
  return async (controller, env, ctx) => {
    const parsed = parseConfig(env);
    if (!parsed.ok) {
      console.error(`sweep skipped: ${parsed.message}`);
      throw new Error(parsed.message);
    }
    const config = parsed.config;
    // Per invocation, like a request's: nothing socket-shaped survives between invocations.
    const { db, pool, close } = open(config);
    const label = qstashLabelFor(config);
    // The alert notice (ADR 0046), sent as the sweep's last step and from its failure path.
    const alertWebhook = config.ALERT_WEBHOOK_URL;
    const notify = (url: string) => sendAlertNotice(db, { url, label, publicUrl: config.PUBLIC_URL });
    const started = Date.now();
    // The step under way, for the failure's record and line: a sweep stops at the
    // step that fails, and "which" is what an operator needs first.
    let step = "";
    const at = <T>(name: string, run: () => Promise<T>): Promise<T> => {
      step = name;
      return run();
    };
    try {
      const relay = await at("relay", () =>
        drain({
          pool,
          publisher: publisherFor(config),
          subscriptions,
          passBackoff: passBackoffFor(config),
          budgetMs: SWEEP_BUDGET_MS,
          until: "empty",
        }),
      );
      const deleted = await at("event retention", () =>
        deleteOldFannedEvents(pool, { olderThanDays: config.RETENTION_DAYS }),
      );
      const vacuum = await at("vacuum", () => vacuumEventsIfNeeded(pool));
      const raised = await at("relay alerts", () => evaluateAlerts(pool));
      const disabled = await at("webhook auto-disable", () =>
        disableFailingEndpoints(db, { afterDays: config.WEBHOOK_DISABLE_AFTER_DAYS, now: now() }),
      );
      const lagging = await at("webhook lag alerts", () => evaluateEndpointLag(db, { now: now() }));
      const endpointsFailing = await at("failing endpoint alerts", () =>
        evaluateFailingEndpoints(db, { now: now() }),
      );
      const failing = await at("failing subscription alerts", () =>
        evaluateFailingSubscriptions(db, { now: now() }),
      );
      const cut = { olderThanDays: config.RETENTION_DAYS, now: now() };
      const deliveriesDeleted = await at("delivery retention", () => deleteOldDeliveries(db, cut));
      const records = await at("record retention", () => deleteOldRecords(db, cut));
      const keysDeleted = await at("idempotency key retention", () => deleteExpiredKeys(db, now()));
      const loginFailures = await at("sign-in retention", () => deleteStaleLoginFailures(db));
      const deadLetters = await at("dead letters", () =>
        collectDeadLetters(db, deadLettersFor(config), {
          label,
          publicUrl: config.PUBLIC_URL,
        }),
      );
      const queue = deliverQueueFor(config);
      const republished = await at("lost publishes", () => publishUnpublished(db, queue, now()));
      const overdue = await at("overdue deliveries", () =>
        publishOverdue(db, queue, qstashMessagesFor(config), now()),
      );
      const backlog = await at("wait lists", () =>
        evaluateBacklogs(db, waitListsFor(config), { publicUrl: config.PUBLIC_URL, now: now() }),
      );
      const canary = await at("canary", () =>
        checkCanary(db, canaryQueueFor(config), {
          label,
          publicUrl: config.PUBLIC_URL,
          now: now(),
        }),
      );
      // Last, so the alerts this sweep raised are in its notice.
      const notice = alertWebhook ? await at("alert notice", () => notify(alertWebhook)) : undefined;
      step = "run record";
      // Recorded before the line, whose time it would not count: the views read it.
      await recordSweepFinished(db, {
        durationMs: Date.now() - started,
        retentionDays: config.RETENTION_DAYS,
        // Absent when a test calls the handler; Cloudflare always passes the trigger's.
        cron: typeof controller.cron === "string" ? controller.cron : null,
      });
      console.log(
        `sweep: fanned ${relay.fanned} of ${relay.claimed} claimed in ${relay.passes} pass${relay.passes === 1 ? "" : "es"} (${relay.jobs} jobs, ` +
          `${relay.failed} failed, ${relay.poisoned} poisoned, stopped: ${stoppedText(relay)}); ` +
          `deleted ${deleted} events older than ${config.RETENTION_DAYS} d; ` +
          `${vacuum.vacuumed ? `vacuumed events (${vacuum.deadTuples} dead rows)` : "no vacuum needed"}; ` +
          `relay alerts raised: ${raised.length ? raised.join(", ") : "none"}; ` +
          `webhook endpoints disabled: ${disabled.length ? disabled.join(", ") : "none"}; ` +
          `webhook endpoints behind: ${lagging.count}${listed("newly", lagging.raised)}${listed("caught up", lagging.cleared)}; ` +
          `webhook endpoints failing: ${endpointsFailing.count}${listed("newly", endpointsFailing.raised)}${listed("recovered", endpointsFailing.cleared)}; ` +
          `subscriptions failing: ${failing.failing}${listed("newly", failing.raised)}${listed("recovered", failing.recovered)}; ` +
          `retention past ${config.RETENTION_DAYS} d deleted ${deliveriesDeleted} finished webhook deliveries, ` +
          `${records.alerts} alerts resolved by then, ${records.jobFailures} settled job failures and ${records.mailSends} mail records; ` +
          `deleted ${keysDeleted} idempotency keys older than ${IDEMPOTENCY_KEY_HOURS} h and ` +
          `${loginFailures} wrong sign-ins older than the lock-out reads; ` +
          `dead letters: ${deadLetters.removed} taken from QStash, ${deadLetters.recorded} of them new failures` +
          `${deadLetters.qstashError ? ` (stopped: ${deadLetters.qstashError})` : ""}; ` +
          `re-published ${republished} webhook deliveries whose publish was lost and ${overdue} whose job ` +
          `QStash no longer held ${OVERDUE_AFTER_MINUTES} min after it was due; ` +
          `jobs waiting in QStash: ${waitingText(backlog)}; canary: ${canaryText(canary)}; alert notice: ${noticeText(notice)}; ${Date.now() - started} ms`,
      );
    } catch (error) {
      // A failed query's own words (drizzle's message is the statement, then its
      // parameters, which no log line here carries), or the error's with its cause's.
      const logged = loggable(error);
      const message = `in its "${step}" step: ${typeof logged === "string" ? logged : withCause(error)}`;
      console.error(`sweep failed after ${Date.now() - started} ms`, message);
      // Where an operator looks (ADR 0040); with the database down this fails too, and
      // the views, which need the database, are down with it.
      await recordSweepFailed(db, message.slice(0, 1000)).catch((e: unknown) =>
        console.error("sweep failure not recorded:", (e as Error).message),
      );
      // The alerts raised meanwhile (job failure callbacks, the canary route, the steps
      // before this one) are still told of: the notice was the sweep's last step, so any
      // step that failed kept every alert from the channel (a walkthrough's reading).
      // With the database down this fails too, and says so.
      if (step !== "alert notice" && alertWebhook) {
        const notice = await notify(alertWebhook).catch((e: unknown): AlertNoticeResult => ({
          sent: 0,
          error: `not sent: ${withCause(e)}`,
        }));
        console.error(`sweep failed, alert notice: ${noticeText(notice)}`);
      }
      // Thrown so the platform counts the run failed, in the same words: the error
      // itself was drizzle's, whose message workerd printed as "Uncaught Error: Failed
      // query: … params: …", the parameters the line above leaves out.
      throw new Error(`sweep failed ${message}`);
    } finally {
      ctx.waitUntil(close().catch((e) => console.error("database close:", e)));
    }
  };
}

/** "webhook.fanout 930, others none, backlogged: 1, newly: webhook.fanout", or why QStash was not read. */
function waitingText(check: BacklogCheck): string {
  if (check.unreadable !== undefined) return `not read (${check.unreadable})`;
  // By name, as `stats` and the overview list them.
  const some = Object.entries(check.waiting)
    .filter(([, n]) => n > 0)
    .sort(([a], [b]) => a.localeCompare(b));
  return (
    (some.length ? some.map(([name, n]) => `${name} ${n}`).join(", ") : "none") +
    (check.backlogged ? `, backlogged: ${check.backlogged}` : "") +
    listed("newly", check.raised) +
    listed("caught up", check.caughtUp)
  );
}

/** "sent; jobs arriving", or since when none has arrived and what the sweep did of it. */
function canaryText(check: CanaryCheck): string {
  const sent = check.publishError
    ? `not taken by QStash (${check.publishError})`
    : check.sent
      ? "sent"
      : "none due";
  const state = check.late
    ? `jobs not arriving since ${check.waitingSince?.toISOString()}${check.raised ? " (alert raised)" : ""}`
    : check.waitingSince
      ? `waiting for one sent at ${check.waitingSince.toISOString()}`
      : `jobs arriving${check.resolved ? " again (alert resolved)" : ""}`;
  return `${sent}; ${state}`;
}

/** What the sweep told ALERT_WEBHOOK_URL, or why not. */
function noticeText(notice: AlertNoticeResult | undefined): string {
  if (notice === undefined) return "off (ALERT_WEBHOOK_URL unset)";
  if (notice.error !== undefined) return `not sent, its alerts wait for the next sweep (${notice.error})`;
  return notice.sent === 0 ? "no new alerts" : `${notice.sent} new alert${notice.sent === 1 ? "" : "s"} sent`;
}

/** ", newly: a, b" for a log line; nothing when there are none. */
function listed(what: string, ids: string[]): string {
  return ids.length ? `, ${what}: ${ids.join(", ")}` : "";
}

/** Why the sweep's drain stopped, with the outage that backed the relay off when it did. */
export function stoppedText(relay: DrainResult): string {
  if (relay.stoppedBecause !== "backoff") return relay.stoppedBecause;
  const until = relay.backedOffUntil ? ` until ${relay.backedOffUntil.toISOString()}` : "";
  return relay.error === undefined
    ? `backed off${until}, no pass ran`
    : `backoff${until}: the pass failed, its rows put back: ${relay.error}`;
}
