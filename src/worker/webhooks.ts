import {
  createQStashDeliverQueue,
  createQStashMessages,
  notQueuedMessage,
  type DeliverQueue,
  type QStashMessages,
} from "../domain/webhooks/deliver-queue.ts";
import { createQStashCanaryQueue, type CanaryQueue } from "../domain/canary.ts";
import { createQStashDeadLetters, type DeadLetterQueue } from "../domain/job-failures/dead-letters.ts";
import { createQStashWaitLists, type WaitLists } from "../domain/subscription-backlog.ts";
import { qstashLabelFor, type Config } from "./env.ts";
import { orUnavailable } from "./errors.ts";

/** Deliver jobs published through the same QStash as the relay's, to this Worker's `/jobs/webhook.deliver`. */
export function deliverQueueFor(
  config: Pick<
    Config,
    | "QSTASH_URL"
    | "QSTASH_TOKEN"
    | "PUBLIC_URL"
    | "WEBHOOK_RETRY_SCHEDULE"
    | "QSTASH_BATCH_MESSAGES"
    | "QSTASH_LABEL"
  >,
): DeliverQueue {
  return createQStashDeliverQueue({
    baseUrl: config.QSTASH_URL,
    token: config.QSTASH_TOKEN,
    publicUrl: config.PUBLIC_URL,
    retries: config.WEBHOOK_RETRY_SCHEDULE.length,
    batchMessages: config.QSTASH_BATCH_MESSAGES,
    label: qstashLabelFor(config),
  });
}

/** The same QStash, asked whether it still holds a deliver job (the sweep's check before republishing). */
export function qstashMessagesFor(config: Config): QStashMessages {
  return createQStashMessages({ baseUrl: config.QSTASH_URL, token: config.QSTASH_TOKEN });
}

/** The same QStash's flow-control keys, where the sweep reads how many jobs each subscription has waiting. */
export function waitListsFor(config: Config): WaitLists {
  return createQStashWaitLists({ baseUrl: config.QSTASH_URL, token: config.QSTASH_TOKEN });
}

/** The same QStash, for the sweep's canary jobs to this Worker's `/jobs/_canary` (ADR 0045). */
export function canaryQueueFor(config: Config): CanaryQueue {
  return createQStashCanaryQueue({
    baseUrl: config.QSTASH_URL,
    token: config.QSTASH_TOKEN,
    publicUrl: config.PUBLIC_URL,
    label: qstashLabelFor(config),
  });
}

/** The same QStash's dead-letter queue, where the sweep finds jobs whose failure callback never reached us. */
export function deadLettersFor(config: Config): DeadLetterQueue {
  return createQStashDeadLetters({ baseUrl: config.QSTASH_URL, token: config.QSTASH_TOKEN });
}

/**
 * An operator's re-send (redeliver, recover, a test event), or a 503 saying that
 * QStash did not take its job and nothing changed for `what`, so asking again is
 * safe: the admin routes and the dashboard's buttons answer alike.
 */
export function queuedOrRefused<T>(what: string, send: () => Promise<T>): Promise<T> {
  return orUnavailable(send, (error) => notQueuedMessage(what, error));
}
