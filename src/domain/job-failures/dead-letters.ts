import { qstashClient } from "../../outbox/index.ts";
import type { Db } from "../db.ts";
import { base64Text, failedJobFromCallback, recordFailedJob, type FailedJob } from "./failed-job.ts";

/** One entry of QStash's dead-letter queue, as far as the sweep reads it. */
export interface DeadLetter {
  dlqId: string;
  messageId: string;
  url: string;
  /** The message's body as text (QStash sends `bodyBase64` when it is not UTF-8). */
  body: string;
  responseStatus: number | null;
  responseBody: string | null;
  /** The retries the message was published with. */
  maxRetries: number | null;
}

/** QStash's dead-letter queue, read a page at a time for one destination URL. */
export interface DeadLetterQueue {
  /** The oldest dead letters published to `url`, at most `count`. */
  list(url: string, count: number): Promise<DeadLetter[]>;
  remove(dlqIds: string[]): Promise<void>;
}

/** QStash's largest DLQ page (list-dlq-messages docs: "Default and maximum is 100"). */
export const DEAD_LETTER_PAGE = 100;

/**
 * DLQ pages one sweep reads, over all our URLs (five in the reference app, each
 * read at least once): each is a request, and a page with dead letters of ours
 * one more to delete them, within a sweep's subrequests. A backlog (an outage's
 * worth) is worked off over several sweeps.
 */
export const DEAD_LETTER_PAGES_PER_SWEEP = 10;

export function createQStashDeadLetters(options: { baseUrl: string; token: string }): DeadLetterQueue {
  const client = qstashClient(options);
  return {
    async list(url, count) {
      const { messages } = await client.dlq.listMessages({ filter: { url }, count });
      return messages.map((m) => ({
        dlqId: m.dlqId,
        messageId: m.messageId,
        url: m.url,
        body: m.body ?? (m.bodyBase64 === undefined ? "" : base64Text(m.bodyBase64)),
        responseStatus: m.responseStatus ?? null,
        responseBody:
          m.responseBody ?? (m.responseBodyBase64 === undefined ? null : base64Text(m.responseBodyBase64)),
        maxRetries: m.maxRetries ?? null,
      }));
    },
    async remove(dlqIds) {
      if (dlqIds.length > 0) await client.dlq.delete(dlqIds);
    },
  };
}

export interface DeadLetterUrls {
  /** Every job route we publish to: `<PUBLIC_URL>/jobs/<name>`. */
  jobs: string[];
  /** The failure callback's URL: its own messages dead-letter too. */
  failureCallback: string;
}

/**
 * The cron sweep's repair for a failure callback that never reached us. QStash
 * calls `/jobs/_failed` once a job is out of retries, and retries that call; if
 * the Worker was down (or failing) through both, the job's only trace is its
 * entry in QStash's dead-letter queue, which QStash keeps for days, not for ever.
 * So the sweep reads the queue for each of our URLs, records every dead letter
 * as the callback would have (recordFailedJob: idempotent on the message id, so
 * a callback that did arrive, before or after, records nothing twice), and then
 * deletes the entries it recorded: `job_failures` and the deliveries are where
 * operators see and retry failed jobs, and a queue emptied of ours keeps each
 * sweep's reading to the new ones. A dead letter of the failure callback itself
 * carries the callback's body and is recorded from it. Entries of other
 * destinations on the same QStash account are never touched. A record that
 * fails throws before anything is deleted; the next sweep tries again. QStash out
 * of reach (or refusing) stops the reading and is answered, not thrown: the sweep's
 * other work does not wait on QStash, and the letters wait for a later sweep.
 */
export interface DeadLettersCollected {
  /** Dead letters that were new failures (the rest had been recorded from their callback). */
  recorded: number;
  /** Dead letters of ours taken out of QStash's queue. */
  removed: number;
  /** Why reading stopped early: QStash's error, when it could not be asked. */
  qstashError?: string;
}

export async function collectDeadLetters(
  db: Db,
  dlq: DeadLetterQueue,
  urls: DeadLetterUrls,
  options: { pages?: number } = {},
): Promise<DeadLettersCollected> {
  let pages = options.pages ?? DEAD_LETTER_PAGES_PER_SWEEP;
  const ours = new Set(urls.jobs);
  let recorded = 0;
  let removed = 0;
  // In turns, a page per URL, so one URL's backlog cannot hide another's letters.
  let open = [...urls.jobs, urls.failureCallback];
  while (open.length > 0 && pages > 0) {
    const more: string[] = [];
    for (const url of open) {
      if (pages === 0) break;
      pages--;
      let page: DeadLetter[];
      try {
        page = await dlq.list(url, DEAD_LETTER_PAGE);
      } catch (error) {
        return { recorded, removed, qstashError: messageOf(error) };
      }
      const done: string[] = [];
      for (const letter of page) {
        let failed: FailedJob | null;
        if (letter.url === urls.failureCallback) failed = failedJobFromCallback(letter.body);
        else if (ours.has(letter.url)) failed = fromDeadLetter(letter);
        // QStash's filter matched a URL we do not publish to: not ours to delete.
        else continue;
        // A callback body we cannot read has nothing to record; its job's own
        // dead letter (QStash keeps one whether or not the callback arrives) does.
        if (failed && (await recordFailedJob(db, failed)).recorded) recorded++;
        done.push(letter.dlqId);
      }
      try {
        await dlq.remove(done);
      } catch (error) {
        // Recorded all the same: the next sweep finds them again and adds nothing.
        return { recorded, removed, qstashError: messageOf(error) };
      }
      removed += done.length;
      // A full page may have more behind it; a page of nothing ours would come back the same.
      if (page.length === DEAD_LETTER_PAGE && done.length > 0) more.push(url);
    }
    open = more;
  }
  return { recorded, removed };
}

function fromDeadLetter(letter: DeadLetter): FailedJob {
  return {
    messageId: letter.messageId,
    url: letter.url,
    body: letter.body,
    status: letter.responseStatus,
    responseBody: letter.responseBody,
    // All it was published with, unless the route said not to retry (489: QStash
    // dead-letters at once, after however many it had made; the letter does not say).
    retried: letter.responseStatus === 489 ? null : letter.maxRetries,
    dlqId: letter.dlqId,
  };
}

function messageOf(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : "";
  return error instanceof Error ? `${error.message}${cause}` : String(error);
}
