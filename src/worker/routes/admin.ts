import { z } from "zod";
import { ALERT_KIND_RULE, isAlertKind } from "../../domain/alert-kinds.ts";
import { subscriptionFilter } from "../../domain/subscriptions.ts";
import type { Db } from "../../domain/db.ts";
import { eventJobFailures, jobFailuresPage } from "../../domain/job-failures/record.ts";
import { eventDeliveries } from "../../domain/webhooks/delivery-log.ts";
import {
  notRetriedMessage,
  openAlertsCountingEvent,
  operatorStats,
  retryAllJobFailures,
  retryJobFailure,
  type RetryAllResult,
} from "../../domain/job-failures/retry.ts";
import {
  EVENT_GONE_HINT,
  alertsPage,
  browseEvents,
  EVENT_STATES,
  getEvent,
  isTypeGlob,
  publishAdvice,
  IDENTITY_ID_DIGITS,
  openAlertKinds,
  resolveAlert,
  resolveAlerts,
  requeue,
  requeuePoisoned,
  TYPE_GLOB_RULE,
} from "../../outbox/index.ts";
import { scopeFilter, singleLine, wholeNumber } from "../../domain/text.ts";
import { adminAuth } from "../admin-auth.ts";
import type { Config } from "../env.ts";
import type { App } from "../new-app.ts";
import { ApiError, orUnavailable } from "../errors.ts";
import { isSafeMethod } from "../methods.ts";
import { publisherFor } from "../relay.ts";
import { noQueryOnOperatorWrites } from "../tenant-auth.ts";
import { invalidInput, noBody, noQuery, valid } from "../validate.ts";
import { ID } from "./params.ts";
import { eventWaitingNotes } from "../../domain/webhooks/fanout.ts";

/** A job failure's id as a path segment; anything else is no route, a 404, as with ID. */
export const JOB_FAILURE_ID = `:id{${IDENTITY_ID_DIGITS}}` as const;

const limit = wholeNumber(1, 1000).default(50);
// A page's cursor, as the previous page's `nextBefore` gave it: only older rows (a
// smaller seq for events, a smaller id for alerts and job failures). Keyset rather
// than an offset, so rows added while a caller pages do not shift the next page.
const before = wholeNumber(1, Number.MAX_SAFE_INTEGER).optional();

const eventsQuery = z.strictObject({
  state: z.enum(EVENT_STATES).optional(),
  // The same type globs subscriptions use, e.g. `supplier.*`: a filter no event type
  // can match (`Bad Type`) is a mistake to say, not an empty list.
  type: singleLine(200).refine(isTypeGlob, TYPE_GLOB_RULE).optional(),
  subject: singleLine(200).optional(),
  // `?scope=` with no value: the events without a scope, as for webhook endpoints.
  scope: scopeFilter,
  limit,
  before,
});

const requeueBody = z.strictObject({
  ids: z.array(z.guid("must be an event id (a UUID)")).min(1, "must name at least one event").max(1000),
});

const requeuePoisonedBody = z.strictObject({
  // The newest poisoning the operator saw: one poisoned later (its cause not fixed
  // yet) is not put back unseen.
  upTo: z.iso
    .datetime({
      offset: true,
      message: "must be a time in ISO 8601 with its offset, e.g. 2026-12-05T18:00:00Z",
    })
    .transform(throughItsLastDigit),
  type: singleLine(200).refine(isTypeGlob, TYPE_GLOB_RULE).optional(),
});

/**
 * A time as the whole of its last given digit: `…:52.141Z` is up to `…:52.141999Z`.
 * The API shows `poisonedAt` to the millisecond (a JSON Date) and Postgres keeps the
 * microsecond, so the `poisonedAt` an operator read back and sent as `upTo` fell
 * short of its own event, and requeued nothing. Digits past the microsecond are
 * Postgres's to round, as before.
 */
function throughItsLastDigit(time: string): string {
  const [, clock, fraction = "", offset] = /^(.*T\d\d:\d\d(?::\d\d)?)(?:\.(\d+))?(.*)$/.exec(time)!;
  const toTheSecond = /:\d\d:\d\d$/.test(clock!) ? clock : `${clock}:59`;
  return `${toTheSecond}.${fraction.padEnd(6, "9")}${offset}`;
}

const resolveKindBody = z.strictObject({
  kind: singleLine(200),
  // The newest alert of the kind the caller saw (an alert id).
  upTo: z
    .number("must be an alert id (a positive whole number)")
    // As retryAllBody's: .int() made 2^63 two issues.
    .refine(Number.isInteger, { message: "must be an alert id (a positive whole number)", abort: true })
    .min(1, "must be at least 1")
    .max(Number.MAX_SAFE_INTEGER, "is past any alert id"),
});

const retryAllBody = z.strictObject({
  // The newest failure the operator saw: one recorded later is not retried unseen.
  upTo: z
    .number("must be a job failure id (a positive whole number)")
    // Not .int(): its safe-integer check said "not a whole number" beside "is past any
    // job failure id" for 2^63, two issues for one field.
    .refine(Number.isInteger, { message: "must be a job failure id (a positive whole number)", abort: true })
    .min(1, "must be at least 1")
    .max(Number.MAX_SAFE_INTEGER, "is past any job failure id"),
  // After one subscriber's outage: only its failures.
  subscription: subscriptionFilter,
});

const jobFailuresQuery = z.strictObject({ limit, before, subscription: subscriptionFilter });

/**
 * Operator routes (JSON), the HTTP face of what `npm run outbox` does from a
 * terminal: backlog and relay state, events with their fan-out and errors,
 * requeueing poisoned events, alerts, and jobs that exhausted their retries
 * (and retrying one of them).
 */
export function registerAdmin(app: App) {
  app.use("/admin/*", adminAuth);
  app.use("/admin/*", noQueryOnOperatorWrites);
  app.use("/admin/*", async (c, next) => {
    // Said, not ignored: a client that counts on the key would create twice when it
    // resends. Operator writes are not remembered: the creates' answers hold a
    // secret shown once (an API key, an endpoint's signing secret), which must not
    // be kept for a replay (a rotation's too); the other actions act on what is
    // still to do and are safe to resend.
    if (!isSafeMethod(c.req.method) && c.req.header("idempotency-key") !== undefined)
      throw new ApiError(
        "BAD_REQUEST",
        "operator routes take no Idempotency-Key: a create's answer holds a secret shown once, never kept " +
          "for a replay; after a timeout, list what exists before sending it again",
        [{ path: "header.idempotency-key", message: "not taken by operator routes" }],
      );
    await next();
  });

  app.get("/admin/stats", noQuery, async (c) => c.json({ stats: await operatorStats(c.var.pool, c.var.db) }));

  // The CLI's `events list` and the dashboard's events page, a page at a time.
  app.get("/admin/events", valid("query", eventsQuery), async (c) => {
    const { before: beforeSeq, ...filter } = c.req.valid("query");
    const page = await browseEvents(c.var.pool, { ...filter, beforeSeq });
    return c.json({ events: page.events, nextBefore: page.nextBeforeSeq });
  });

  app.get(`/admin/events/${ID}`, noQuery, async (c) => {
    const id = c.req.param("id");
    const event = await getEvent(c.var.pool, id);
    if (!event) throw new ApiError("NOT_FOUND", `event ${id} not found: ${EVENT_GONE_HINT}`);
    const [webhookDeliveries, jobFailures, countingAlerts] = await Promise.all([
      eventDeliveries(c.var.db, id),
      eventJobFailures(c.var.db, id),
      openAlertsCountingEvent(c.var.db, id),
    ]);
    // As `events show` and the event's dashboard page: what its webhooks did too, or
    // why none, and which of its jobs may still wait in QStash.
    const { jobsWaiting, webhooksNote } = await eventWaitingNotes(c.var.db, event, {
      jobFailures,
      webhookDeliveries: webhookDeliveries.length,
    });
    return c.json({
      event: { ...event, webhookDeliveries, webhooksNote, jobsWaiting, jobFailures, countingAlerts },
    });
  });

  app.post("/admin/events/requeue", valid("json", requeueBody), async (c) => {
    return c.json(await requeue(c.var.pool, c.req.valid("json").ids));
  });

  app.post("/admin/events/requeue-poisoned", valid("json", requeuePoisonedBody), async (c) => {
    return c.json(await requeuePoisoned(c.var.pool, c.req.valid("json")));
  });

  app.get(
    "/admin/alerts",
    valid("query", z.strictObject({ open: z.enum(["true", "false"]).optional(), limit, before })),
    async (c) => {
      const { open, ...page } = c.req.valid("query");
      return c.json(await alertsPage(c.var.pool, { open: open === "true", ...page }));
    },
  );

  // Resolving records that an operator has looked (the dashboard's Resolve, the CLI's
  // `alerts resolve`); it changes no event. All of a kind only up to the newest the
  // caller saw (`upTo`), so an alert raised meanwhile is not resolved unseen.
  app.post(`/admin/alerts/:id{${IDENTITY_ID_DIGITS}}/resolve`, noBody, async (c) => {
    const id = Number(c.req.param("id"));
    const outcome = await resolveAlert(c.var.pool, id);
    if (!outcome) throw new ApiError("NOT_FOUND", `alert ${id} not found`);
    return c.json({ id, kind: outcome.kind, resolved: outcome.wasOpen, resolvedAt: outcome.resolvedAt });
  });

  app.post("/admin/alerts/resolve", valid("json", resolveKindBody), async (c) => {
    const { kind, upTo } = c.req.valid("json");
    // A kind no alert has is a mistake to say, not "resolved 0": one raised by an
    // older version, still open, is taken too.
    if (!isAlertKind(kind) && !(await openAlertKinds(c.var.pool)).some((k) => k.kind === kind))
      throw invalidInput("invalid body", [{ path: "kind", message: ALERT_KIND_RULE }]);
    return c.json({ kind, resolved: await resolveAlerts(c.var.pool, { kind, upTo }) });
  });

  app.get("/admin/job-failures", valid("query", jobFailuresQuery), async (c) => {
    return c.json(await jobFailuresPage(c.var.db, c.req.valid("query")));
  });

  app.post("/admin/job-failures/retry", valid("json", retryAllBody), async (c) => {
    return c.json(await retryAllOrRefuse(c.var.db, c.var.config, c.req.valid("json")));
  });

  app.post(`/admin/job-failures/${JOB_FAILURE_ID}/retry`, noBody, async (c) => {
    const retried = await retryOrRefuse(c.var.db, c.var.config, Number(c.req.param("id")));
    return c.json(retried);
  });
}

/**
 * Retries a recorded job failure (src/domain/job-failures/retry.ts), or throws the
 * answer an operator gets instead: 404 unknown, 409 already retried or not a job of
 * ours, 503 when QStash did not take the job (the failure is left un-retried, so
 * asking again works). The admin route and the dashboard's form share it; the form
 * takes `retriedAlready` as done (a second tab's press, a reload that resubmits):
 * the page it returns to says how the failure was retried.
 */
export async function retryOrRefuse(
  db: Db,
  config: Config,
  id: number,
  options: { retriedAlready?: "refuse" | "done" } = {},
): Promise<{ id: number; retriedAt: Date; retryMessageId: string | null }> {
  const result = await orUnavailable(
    () => retryJobFailure(db, publisherFor(config), id),
    (error) => notRetriedMessage(id, error),
  );
  if (result.retried) return { id, retriedAt: result.retriedAt, retryMessageId: result.retryMessageId };
  if (result.refused === "already_retried" && options.retriedAlready === "done")
    return { id, retriedAt: result.retriedAt, retryMessageId: result.retryMessageId };
  throw new ApiError(result.refused === "not_found" ? "NOT_FOUND" : "CONFLICT", result.message);
}

/**
 * Retries every open failure up to `upTo` (retryAllJobFailures), of `subscription`
 * when it names one, at most RETRY_ALL_LIMIT a request: 200 with what was retried
 * and whether more are left, or 503 when QStash did not take the jobs (none of them
 * is marked retried).
 */
export function retryAllOrRefuse(
  db: Db,
  config: Config,
  options: { upTo: number; subscription?: string },
): Promise<RetryAllResult> {
  return orUnavailable(
    () => retryAllJobFailures(db, publisherFor(config), options),
    (error) =>
      `QStash did not take the retried jobs (${error.message}); none is marked retried: ${publishAdvice(error)}`,
  );
}
