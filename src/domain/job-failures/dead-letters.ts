import {
  failureCallbackUrl,
  jobUrl,
  JOBS_PATH,
  qstashAnswerWithin,
  qstashClient,
  withCause,
} from "../../outbox/index.ts";
import { CANARY_JOB, recordCanaryAnswer } from "../canary.ts";
import type { Db } from "../db.ts";
import { base64Text, failedJobFromCallback, recordFailedJobs, type FailedJob } from "./failed-job.ts";

/** One entry of QStash's dead-letter queue, as far as the sweep reads it. */
export interface DeadLetter {
  dlqId: string;
  messageId: string;
  url: string;
  /** The message's labels; null when QStash's answer did not say. */
  labels: string[] | null;
  /** The message's body as text (QStash sends `bodyBase64` when it is not UTF-8). */
  body: string;
  responseStatus: number | null;
  responseBody: string | null;
  /** The retries the message was published with. */
  maxRetries: number | null;
}

/** Which dead letters a listing asks QStash for: those with a label, or those sent to a URL. */
export type DeadLetterFilter = { label: string } | { url: string };

export interface DeadLetterPage {
  letters: DeadLetter[];
  /** Where the next page starts; absent on the last. */
  cursor?: string;
}

/** QStash's dead-letter queue, read a page at a time. */
export interface DeadLetterQueue {
  /** At most `count` dead letters matching `filter`, from `cursor` on (the oldest first without one). */
  list(filter: DeadLetterFilter, count: number, cursor?: string): Promise<DeadLetterPage>;
  remove(dlqIds: string[]): Promise<void>;
}

/** QStash's largest DLQ page (list-dlq-messages docs: "Default and maximum is 100"). */
export const DEAD_LETTER_PAGE = 100;

/**
 * DLQ pages one sweep reads: each is a request, and removing what it found one more
 * (ids go in the query string, so at most a page's worth per request), within a
 * sweep's subrequests. A quiet sweep reads two, the label's and the failure
 * callback's; a backlog (an outage's worth) is worked off over several sweeps.
 */
export const DEAD_LETTER_PAGES_PER_SWEEP = 10;

export function createQStashDeadLetters(options: {
  baseUrl: string;
  token: string;
  /** How long each request may go unanswered; QSTASH_ANSWER_TIMEOUT_MS unless given. */
  timeoutMs?: number;
}): DeadLetterQueue {
  const client = qstashClient(options);
  const within = <T>(work: Promise<T>, what: string) => qstashAnswerWithin(work, what, options.timeoutMs);
  return {
    async list(filter, count, cursor) {
      const page = await within(
        client.dlq.listMessages({ filter, count, ...(cursor ? { cursor } : {}) }),
        "a dead-letter listing",
      );
      return {
        letters: page.messages.map((m) => ({
          dlqId: m.dlqId,
          messageId: m.messageId,
          url: m.url,
          labels: m.labels ?? (m.label === undefined ? null : [m.label]),
          body: m.body ?? (m.bodyBase64 === undefined ? "" : base64Text(m.bodyBase64)),
          responseStatus: m.responseStatus ?? null,
          responseBody:
            m.responseBody ?? (m.responseBodyBase64 === undefined ? null : base64Text(m.responseBodyBase64)),
          maxRetries: m.maxRetries ?? null,
        })),
        ...(page.cursor ? { cursor: page.cursor } : {}),
      };
    },
    async remove(dlqIds) {
      if (dlqIds.length > 0) await within(client.dlq.delete(dlqIds), "a dead-letter deletion");
    },
  };
}

/** Whose dead letters the sweep collects: the deployment's label and its public URL. */
export interface DeadLetterOwner {
  /** What every job of this deployment is published with (qstashLabelFor, ADR 0027). */
  label: string;
  /** PUBLIC_URL: jobs are `<publicUrl>/jobs/<name>`, the failure callback `<publicUrl>/jobs/_failed`. */
  publicUrl: string;
}

/**
 * The cron sweep's repair for a failure callback that never reached us. QStash
 * calls `/jobs/_failed` once a job is out of retries, and retries that call; if
 * the Worker was down (or failing) through both, the job's only trace is its
 * entry in QStash's dead-letter queue, which QStash keeps for days, not for ever.
 * So the sweep reads the queue, records every dead letter of ours as the callback
 * would have (recordFailedJobs: idempotent on the message id, so a callback that did
 * arrive, before or after, records nothing twice), and then deletes the entries it
 * recorded: `job_failures` and the deliveries are where operators see and retry
 * failed jobs, and a queue emptied of ours keeps each sweep's reading to the new ones.
 *
 * Ours are found by the deployment's label (ADR 0027), which every job carries, so
 * a job of a subscription since removed, or of a job route since renamed, is found
 * too; a dead letter is taken only when it was also sent to a job route under this
 * PUBLIC_URL (a deployment sharing the account and, by mistake, the label keeps its
 * own). The failure callback's own dead letters are listed by its URL, since QStash
 * does not say a callback carries its message's label; one carries the callback's
 * body and is recorded from it. Entries of other destinations are never touched.
 *
 * A sweep reads its pages first and records and deletes after, so a cursor that
 * counts entries is not moved by the deletions. A record that fails throws before
 * anything is deleted; the next sweep tries again. QStash out of reach (or refusing)
 * stops the reading and is answered, not thrown: what was read is still collected,
 * the sweep's other work does not wait on QStash, and the rest waits for a later sweep.
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
  owner: DeadLetterOwner,
  options: { pages?: number } = {},
): Promise<DeadLettersCollected> {
  const callback = failureCallbackUrl(owner.publicUrl);
  const jobs = `${owner.publicUrl.replace(/\/+$/, "")}${JOBS_PATH}/`;
  const { letters, qstashError } = await readDeadLetters(
    dlq,
    [{ label: owner.label }, { url: callback }],
    options.pages ?? DEAD_LETTER_PAGES_PER_SWEEP,
  );
  const canary = jobUrl(owner.publicUrl, CANARY_JOB);
  const failures: FailedJob[] = [];
  const canaries: DeadLetter[] = [];
  const done: string[] = [];
  for (const letter of letters) {
    let failed: FailedJob | null;
    const labelled = letter.labels === null || letter.labels.includes(owner.label);
    if (letter.url === callback) failed = failedJobFromCallback(letter.body);
    // A canary is no job failure: what it was answered goes on its row (ADR 0045).
    else if (letter.url === canary && labelled) {
      canaries.push(letter);
      continue;
    } else if (letter.url.startsWith(jobs) && labelled) failed = fromDeadLetter(letter);
    // Our label on another deployment's URL (or an old PUBLIC_URL's): not ours to delete.
    else continue;
    // A callback body we cannot read has nothing to record; its job's own dead
    // letter (QStash keeps one whether or not the callback arrives) does.
    if (failed) failures.push(failed);
    done.push(letter.dlqId);
  }
  // All of them in one go (a statement for deliveries, one for the rest): one
  // statement per letter made a failure storm's sweep take over a minute.
  const recorded = await recordFailedJobs(db, failures);
  // A canary's letter is taken only when the canary was ours: another deployment on
  // our label and URL (its PUBLIC_URL is ours) reads its own, and its alert says why.
  for (const letter of canaries) if (await recordCanaryAnswer(db, letter)) done.push(letter.dlqId);
  let removed = 0;
  for (let i = 0; i < done.length; i += DEAD_LETTER_PAGE) {
    const ids = done.slice(i, i + DEAD_LETTER_PAGE);
    try {
      await dlq.remove(ids);
    } catch (error) {
      // Recorded all the same: the next sweep finds them again and adds nothing.
      return { recorded, removed, qstashError: withCause(error) };
    }
    removed += ids.length;
  }
  return { recorded, removed, ...(qstashError === undefined ? {} : { qstashError }) };
}

/**
 * Up to `pages` pages over the filters, a page of each in turn, so one filter's
 * backlog cannot hide another's letters. A letter both filters find is read once.
 */
async function readDeadLetters(
  dlq: DeadLetterQueue,
  filters: DeadLetterFilter[],
  pages: number,
): Promise<{ letters: DeadLetter[]; qstashError?: string }> {
  const letters = new Map<string, DeadLetter>();
  let open = filters.map((filter) => ({ filter, cursor: undefined as string | undefined }));
  while (open.length > 0 && pages > 0) {
    const more: typeof open = [];
    for (const source of open) {
      if (pages === 0) break;
      pages--;
      let page: DeadLetterPage;
      try {
        page = await dlq.list(source.filter, DEAD_LETTER_PAGE, source.cursor);
      } catch (error) {
        return { letters: [...letters.values()], qstashError: withCause(error) };
      }
      for (const letter of page.letters) letters.set(letter.dlqId, letter);
      if (page.cursor) more.push({ filter: source.filter, cursor: page.cursor });
    }
    open = more;
  }
  return { letters: [...letters.values()] };
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
