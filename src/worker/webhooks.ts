import {
  createQStashDeliverQueue,
  createQStashMessages,
  type DeliverQueue,
  type QStashMessages,
} from "../domain/webhooks/deliver-queue.ts";
import { createQStashDeadLetters, type DeadLetterQueue } from "../domain/job-failures/dead-letters.ts";
import { qstashLabelFor, type Config } from "./env.ts";

/** Deliver jobs published through the same QStash as the relay's, to this Worker's `/jobs/webhook.deliver`. */
export function deliverQueueFor(config: Config): DeliverQueue {
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

/** The same QStash's dead-letter queue, where the sweep finds jobs whose failure callback never reached us. */
export function deadLettersFor(config: Config): DeadLetterQueue {
  return createQStashDeadLetters({ baseUrl: config.QSTASH_URL, token: config.QSTASH_TOKEN });
}
