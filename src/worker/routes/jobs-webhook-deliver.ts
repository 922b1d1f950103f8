import { z } from "zod";
import { safeJson } from "../../domain/text.ts";
import { deliverWebhook, type DeliverOutcome } from "../../domain/webhooks/deliver.ts";
import { DELIVER_JOB } from "../../domain/webhooks/deliver-queue.ts";
import { JOBS_PATH, jobUrl } from "../../outbox/index.ts";
import { ApiError } from "../errors.ts";
import type { App } from "../new-app.ts";
import { verifiedBody } from "../signature.ts";
import { webhookSecretsKey } from "../webhook-secrets-key.ts";

const deliverJob = z.strictObject({ deliveryId: z.guid() });

/**
 * `POST /jobs/webhook.deliver`: one attempt of one webhook delivery. Its own
 * route beside the subscriptions' because its job names a delivery row, not an
 * event. Like every job route it verifies QStash's signature over the raw body
 * for this exact URL before reading anything.
 *
 * The answer is what QStash acts on, and so it carries out the retry schedule:
 * 200 when there is nothing more to do (delivered, 410 Gone, settled already or
 * carried by a newer job),
 * 503 with `Retry-After` = the schedule's next delay (or the receiver's own,
 * when longer) after a failed attempt, 489 non-retryable after the failed attempt
 * that ends the schedule, 409 with `Retry-After` = the rest of the lease when
 * another delivery of the job holds it.
 */
export function registerJobsWebhookDeliver(app: App) {
  const path = `${JOBS_PATH}/${DELIVER_JOB}`;
  app.post(path, async (c) => {
    const config = c.var.config;
    const raw = await verifiedBody(c, jobUrl(config.PUBLIC_URL, DELIVER_JOB));
    const parsed = deliverJob.safeParse(safeJson(raw));
    // Signed by QStash yet not a delivery: just as wrong on every retry.
    if (!parsed.success) throw new ApiError("job_rejected", "job body is not a webhook delivery");
    const retried = Number(c.req.header("upstash-retried") ?? 0) || 0;
    // Which job this is: one a redeliver replaced is told to stop (deliverWebhook).
    const messageId = c.req.header("upstash-message-id") || undefined;
    const outcome = await deliverWebhook(
      {
        db: c.var.db,
        secretsKey: await webhookSecretsKey(config),
        schedule: config.WEBHOOK_RETRY_SCHEDULE,
        urlPolicy: { allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_URLS },
      },
      parsed.data.deliveryId,
      retried,
      messageId,
    );
    const answer = toAnswer(outcome);
    return c.json({ ...answer.body, outcome }, answer.status as 200, answer.headers);
  });
}

function toAnswer(outcome: DeliverOutcome): {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
} {
  switch (outcome.kind) {
    case "delivered":
    case "settled":
    case "gone":
    case "url_refused":
    case "endpoint_disabled":
      return { status: 200, headers: {}, body: { ok: true } };
    case "busy":
      return {
        status: 409,
        headers: { "Retry-After": String(outcome.retryAfterSeconds) },
        body: {
          error: { code: "delivery_in_progress", message: "another delivery of this job holds the lease" },
        },
      };
    case "retry":
      if (outcome.retryAfterSeconds === null) {
        // The schedule is spent: no more retries, whatever the job was published with.
        // A job with more (a CLI re-send without this Worker's WEBHOOK_RETRY_SCHEDULE)
        // had a 503 without Retry-After here, and QStash came back on its own backoff,
        // up to days later. 489 ends it now: the dead-letter queue and the failure
        // callback follow, which fail the delivery.
        return {
          status: 489,
          headers: { "Upstash-NonRetryable-Error": "true" },
          body: { error: { code: "delivery_failed", message: outcome.reason } },
        };
      }
      return {
        status: 503,
        headers: { "Retry-After": String(outcome.retryAfterSeconds) },
        body: { error: { code: "delivery_failed", message: outcome.reason } },
      };
  }
}
