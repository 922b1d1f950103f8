import {
  nextRetryDelaySeconds,
  noteFailedAttempt,
  noteRecovered,
} from "../../domain/job-failures/failing.ts";
import { markRetryDelivered, RETRY_OF_HEADER } from "../../domain/job-failures/retry.ts";
import { createJobHandlers, type JobHandlers, type JobKind } from "../../domain/job-handlers.ts";
import { subscriptions } from "../../domain/subscriptions.ts";
import { httpMailer, noopMailer } from "../../domain/mail/mailer.ts";
import {
  findSubscription,
  jobFailure,
  jobUrl,
  JOBS_PATH,
  NonRetryableError,
  parseJobBody,
  runJob,
  type JobContext,
  type JobHandler,
  type JobOutcome,
} from "../../outbox/index.ts";
import { ApiError, loggable } from "../errors.ts";
import type { App } from "../new-app.ts";
import { verifiedBody } from "../signature.ts";
import { SUBSCRIPTION } from "./params.ts";
import { deliverQueueFor } from "../webhooks.ts";

/**
 * QStash delivers each job here: `POST /jobs/<subscription>`. The signature is
 * checked first, over the raw body, for this exact URL (401 otherwise); only then
 * is the job kind looked up (404) and the body parsed. The handler's outcome
 * becomes the answer QStash acts on: 200 done, 500 retry later, 489 with
 * `Upstash-NonRetryable-Error: true` never retry (a malformed job is one).
 */
export function registerJobsDeliver(app: App) {
  app.post(`${JOBS_PATH}/${SUBSCRIPTION}`, async (c) => {
    const name = c.req.param("subscription");
    const raw = await verifiedBody(c, jobUrl(c.var.config.PUBLIC_URL, name));
    const config = c.var.config;
    const handlers = createJobHandlers({
      db: c.var.db,
      mailer: config.MAIL_API_URL ? httpMailer({ url: config.MAIL_API_URL }) : noopMailer,
      mailTo: config.MAIL_TO,
      deliverQueue: deliverQueueFor(config),
    });
    // Every subscription has a handler (JobHandlers is typed by their names), but only
    // a build that typechecks says so: wrangler's does not. A subscription without
    // one is the deployment's fault, not the job's: a 500, logged, so QStash retries
    // it once a handler is deployed (a 404 said "no subscription" of one that exists).
    if (!isJobKind(handlers, name)) {
      if (findSubscription(subscriptions, name))
        throw new ApiError(
          "MISCONFIGURED",
          `subscription ${name} has no job handler: add it to createJobHandlers (src/domain/job-handlers.ts) ` +
            "and deploy; QStash retries its jobs meanwhile",
        );
      throw new ApiError("NOT_FOUND", `no subscription ${name}`);
    }
    const handler = handlers[name];

    const context: JobContext = {
      messageId: c.req.header("upstash-message-id") ?? "",
      retried: Number(c.req.header("upstash-retried") ?? 0) || 0,
    };
    const { outcome, malformed } = await handle(handler, name, raw, context);
    if (outcome.done) {
      const retryOf = c.req.header(RETRY_OF_HEADER);
      if (retryOf !== undefined)
        await noting(
          () => markRetryDelivered(c.var.db, { header: retryOf, messageId: context.messageId, body: raw }),
          `that job failure ${retryOf}'s retry was delivered`,
          c.var.requestId,
        );
      // A job that had failed before worked: QStash's own retry, or an operator's retry
      // of a job failure (a new message, so QStash counts it as a first attempt).
      if (context.retried > 0 || retryOf !== undefined)
        await noting(
          () => noteRecovered(c.var.db, name, context.messageId),
          `that ${name} works again`,
          c.var.requestId,
        );
      return c.json({ ok: true });
    }
    // A job that is not one (malformed, misrouted) says nothing of the subscription.
    if (malformed) throw new ApiError("job_rejected", outcome.message);
    console.error(`[${c.var.requestId}] job ${context.messageId} ${name}: ${outcome.message}`);
    // When QStash tries this job next (the subscription's retries, QStash's backoff):
    // till then the run of failures is not over, however quiet. A rejected job (a
    // mail provider's 400) is a failed attempt too, and its last:
    // uncounted, it left the retry its previous attempt expected, a day away, and
    // the subscription's alert open that long (a walkthrough).
    const retryIn = outcome.retry
      ? nextRetryDelaySeconds(context.retried, findSubscription(subscriptions, name)?.retries)
      : null;
    await noting(
      () => noteFailedAttempt(c.var.db, name, context.messageId, outcome.message, retryIn),
      `${name}'s failed attempt`,
      c.var.requestId,
    );
    throw new ApiError(outcome.retry ? "job_failed" : "job_rejected", outcome.message);
  });
}

/**
 * What the route notes beside a job's outcome: an operator's retry that worked (on
 * its failure), the subscription's run of failures (failing.ts). Bookkeeping: a
 * database error there is logged and the job answered as its handler decided, or a
 * finished job would run again for the sake of a note.
 */
async function noting(note: () => Promise<unknown>, what: string, requestId: string): Promise<void> {
  try {
    await note();
  } catch (error) {
    // loggable: drizzle's own message carries the statement's parameters.
    console.error(`[${requestId}] noting ${what}:`, loggable(error));
  }
}

function isJobKind(handlers: JobHandlers, name: string): name is JobKind {
  return Object.hasOwn(handlers, name);
}

async function handle(
  handler: JobHandler,
  name: string,
  raw: string,
  context: JobContext,
): Promise<{ outcome: JobOutcome; malformed: boolean }> {
  let job;
  try {
    job = parseJobBody(raw);
    if (job.subscription !== name)
      throw new NonRetryableError(`job for ${job.subscription} delivered to ${name}`);
  } catch (error) {
    // Malformed or misrouted: it will be just as wrong on every retry (no retry).
    return { outcome: jobFailure(error), malformed: true };
  }
  return { outcome: await runJob(handler, job, context), malformed: false };
}
