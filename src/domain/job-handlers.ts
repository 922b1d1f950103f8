import { z } from "zod";
import { NonRetryableError, type JobHandler, type SubscriptionName } from "../outbox/index.ts";
import { refreshNoteIndex } from "./corpus-index/refresh.ts";
import type { Db } from "./db.ts";
import { MailError, type Mailer } from "./mail/mailer.ts";
import { sendMailOnce } from "./mail/send-once.ts";
import type { subscriptions } from "./subscriptions.ts";
import { oneLine } from "./text.ts";
import type { DeliverQueue } from "./webhooks/deliver-queue.ts";
import { fanOutWebhook } from "./webhooks/fanout.ts";

export interface JobHandlerDeps {
  db: Db;
  mailer: Mailer;
  /** Recipient of supplier notifications. */
  mailTo: string;
  /** Where `webhook.fanout` publishes one `webhook.deliver` job per delivery. */
  deliverQueue: DeliverQueue;
}

const uuid = z.guid();
const supplierPayload = z.object({ name: z.string(), status: z.string() }).loose();

/**
 * Every kind of job the Worker runs: one per subscription, so a subscription
 * without a handler does not compile. A job that is not an event's fan-out joins
 * this union with its own name.
 */
export type JobKind = SubscriptionName<typeof subscriptions>;

export type JobHandlers = Record<JobKind, JobHandler>;

/**
 * What each job kind does with a delivered job, keyed by its name.
 * Handlers run once per delivery and throw to fail it: QStash owns retries
 * (guarantee 7). A NonRetryableError marks a job that can never succeed.
 */
export function createJobHandlers(deps: JobHandlerDeps): JobHandlers {
  return {
    // Coalesced: the job names the latest event of a note; the handler re-reads
    // the note, so the earlier events it covers need nothing of their own.
    "corpus.index": async (job) => {
      const noteId = job.event.subject;
      if (!uuid.safeParse(noteId).success) throw new NonRetryableError(`subject ${noteId} is not a note id`);
      await refreshNoteIndex(deps.db, { noteId, eventSeq: job.event.seq });
    },

    // Never coalesced: every event is a delivery of its own to every matching endpoint.
    "webhook.fanout": async (job) => {
      await fanOutWebhook(deps.db, deps.deliverQueue, job.event);
    },

    // One mail per (subscription, event), however often QStash delivers the job.
    "notify.mail": async (job) => {
      const payload = supplierPayload.safeParse(job.event.payload);
      if (!payload.success) throw new NonRetryableError(`event ${job.event.id} has no supplier payload`);
      const { name, status } = payload.data;
      try {
        await sendMailOnce(deps.db, deps.mailer, {
          subscription: job.subscription,
          eventId: job.event.id,
          mail: {
            to: deps.mailTo,
            // Names are checked on the way in; rows older than that check, or written
            // by other code, must still never put a line break into a header.
            subject: oneLine(`Supplier ${name}: ${job.event.type}`),
            text: `Supplier ${name} (${job.event.subject}) is now ${status}.\nEvent ${job.event.id} at ${job.event.createdAt}.`,
          },
        });
      } catch (error) {
        // A mail the provider rejected will be rejected again: stop QStash retrying it.
        if (error instanceof MailError && !error.retry) throw new NonRetryableError(error.message);
        throw error;
      }
    },
  };
}
