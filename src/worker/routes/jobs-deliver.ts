import { createJobHandlers } from "../../domain/job-handlers.ts";
import { httpMailer, noopMailer } from "../../domain/mail/mailer.ts";
import { subscriptions } from "../../domain/subscriptions.ts";
import {
  answerJob,
  NonRetryableError,
  findSubscription,
  jobUrl,
  parseJobBody,
  type JobAnswer,
  type JobContext,
  type JobHandler,
} from "../../outbox/index.ts";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";
import { verifiedBody } from "../signature.ts";
import { SUBSCRIPTION } from "./params.ts";

/**
 * QStash delivers each job here: `POST /jobs/<subscription>`. The signature is
 * checked first, over the raw body, for this exact URL (401 otherwise); only then
 * is the subscription looked up (404) and the body parsed. The handler's outcome
 * becomes the answer QStash acts on: 200 done, 500 retry later, 489 with
 * `Upstash-NonRetryable-Error: true` never retry (a malformed job is one).
 */
export function registerJobsDeliver(app: App) {
  app.post(`/jobs/${SUBSCRIPTION}`, async (c) => {
    const name = c.req.param("subscription");
    const raw = await verifiedBody(c, jobUrl(c.var.config.PUBLIC_URL, name));
    if (!findSubscription(subscriptions, name)) throw new ApiError("NOT_FOUND", `no subscription ${name}`);

    const config = c.var.config;
    const handlers = createJobHandlers({
      db: c.var.db,
      mailer: config.MAIL_API_URL ? httpMailer({ url: config.MAIL_API_URL }) : noopMailer,
      mailTo: config.MAIL_TO,
    });
    const handler = handlers[name];
    // A declared subscription without a handler is a deployment bug: 500, so QStash retries after a fix.
    if (!handler) throw new Error(`subscription ${name} has no job handler`);

    const context: JobContext = {
      messageId: c.req.header("upstash-message-id") ?? "",
      retried: Number(c.req.header("upstash-retried") ?? 0) || 0,
    };
    const answer = await handle(handler, name, raw, context);
    if (answer.status >= 500)
      console.error(`[${c.var.requestId}] job ${context.messageId} ${name}:`, answer.body);
    const body =
      "error" in answer.body ? { error: { ...answer.body.error, requestId: c.var.requestId } } : answer.body;
    return c.json(body, answer.status as 200, answer.headers);
  });
}

async function handle(
  handler: JobHandler,
  name: string,
  raw: string,
  context: JobContext,
): Promise<JobAnswer> {
  let job;
  try {
    job = parseJobBody(raw);
    if (job.subscription !== name)
      throw new NonRetryableError(`job for ${job.subscription} delivered to ${name}`);
  } catch (error) {
    // Malformed or misrouted: it will be just as wrong on every retry; answerJob maps it to 489.
    return answerJob(() => Promise.reject(error), undefined as never, context);
  }
  return answerJob(handler, job, context);
}
