import { sql, type SQL } from "drizzle-orm";
import {
  asPublishError,
  checkedLabel,
  isUuid,
  jobUrl,
  qstashAnswerWithin,
  qstashClient,
} from "../outbox/index.ts";
import { asDate, type Db } from "./db.ts";
import { isoTime, queryRows, utcText } from "./webhooks/rows.ts";

/**
 * The canary's job route, `/jobs/_canary`: named with a leading `_`, as the failure
 * callback's is, so no subscription can take it (their names start with a letter).
 */
export const CANARY_JOB = "_canary";

/** Minutes between canaries while they arrive: 48 QStash messages a day. */
export const CANARY_EVERY_MINUTES = 30;

/**
 * Minutes a canary may take to arrive before the sweep says jobs do not reach the
 * Worker, and between canaries until one does, so a fix is seen within minutes. An
 * unqueued canary arrives in well under a second; five minutes is for a QStash that
 * is slow, not one that is wrong.
 */
export const CANARY_LATE_AFTER_MINUTES = 5;

/**
 * Minutes a canary is given to arrive before it counts against the path. Jobs are
 * late only when two canaries in a row have not arrived, the newer one for at least
 * this long: canaries have no retries, so one lost to a blip (a deploy's 5xx, a
 * QStash hiccup) must not raise the alert, and the replacement a sweep has just sent
 * has not had time (a walkthrough raised and resolved a false alert within a minute).
 */
export const CANARY_GRACE_MINUTES = 1;

/** Days a canary's row is kept once a later one has arrived. */
export const CANARY_KEEP_DAYS = 2;

/** What a canary job carries: its row's id, and the label of the deployment that sent it. */
export interface CanaryBody {
  canaryId: string;
  label: string;
}

/** Where canaries go; answers QStash's message id. Throws a PublishError when QStash did not take it. */
export interface CanaryQueue {
  send(body: CanaryBody): Promise<string>;
}

/**
 * Canaries through QStash to `<publicUrl>/jobs/_canary`: no retries (the sweep sends
 * the next one itself, and a retried canary arriving late would say nothing about
 * now), no failure callback (a canary is no job failure; its dead letter is read by
 * the sweep, collectDeadLetters), no flow-control key (it measures whether jobs
 * arrive, not how long a subscription's queue is: subscription.backlogged says that),
 * and the deployment's label, as every job of ours carries (ADR 0027).
 */
export function createQStashCanaryQueue(options: {
  baseUrl: string;
  token: string;
  publicUrl: string;
  label: string;
  /** How long the publish may go unanswered; QSTASH_ANSWER_TIMEOUT_MS unless given. */
  timeoutMs?: number;
}): CanaryQueue {
  const client = qstashClient(options);
  const url = jobUrl(options.publicUrl, CANARY_JOB);
  const label = checkedLabel(options.label);
  return {
    async send(body) {
      const answer = await qstashAnswerWithin(
        client.publishJSON({ url, body, retries: 0, ...(label === undefined ? {} : { label }) }),
        "the canary's publish",
        options.timeoutMs,
      ).catch((error: unknown) => {
        throw asPublishError(error);
      });
      return answer.messageId;
    },
  };
}

/** What the sweep's canary step did, for its log line and tests. */
export interface CanaryCheck {
  /** A canary was published this sweep (or tried: `publishError` says why QStash did not take it). */
  sent: boolean;
  publishError?: string;
  /** The oldest canary not answered by a later arrival, when one is waiting. */
  waitingSince: Date | null;
  /** Two canaries in a row have not arrived (isLate): the jobs.not_arriving alert is open. */
  late: boolean;
  /** This sweep opened the alert. */
  raised: boolean;
  /** This sweep resolved it: a canary arrived. */
  resolved: boolean;
}

interface CanaryState {
  latest_sent_at: Date | null;
  waiting_since: Date | null;
  waiting: number;
  /** Waiting canaries sent CANARY_GRACE_MINUTES or more ago: two make the jobs late. */
  overdue: number;
  last_arrived_at: Date | null;
  publish_error: string | null;
  answer: string | null;
}

/**
 * The cron sweep's canary step (ADR 0045). Publishes a canary when one is due (every
 * CANARY_EVERY_MINUTES, or every CANARY_LATE_AFTER_MINUTES while none has arrived),
 * raises `jobs.not_arriving` when two in a row have not arrived (the newer given
 * CANARY_GRACE_MINUTES), and resolves it once one arrives. A canary's row is
 * written before it is published, so its arrival always finds it. QStash out of
 * reach is recorded on the row and answered, not thrown: the alert then says QStash
 * did not take it, and the rest of the sweep is not stopped by it.
 */
export async function checkCanary(
  db: Db,
  queue: CanaryQueue,
  options: { label: string; publicUrl: string; now: Date },
): Promise<CanaryCheck> {
  const now = options.now;
  const before = await readCanaryState(db, now);
  const waitingBefore = before.waiting_since !== null;
  const due =
    before.latest_sent_at === null ||
    now.getTime() - before.latest_sent_at.getTime() >=
      (waitingBefore ? CANARY_LATE_AFTER_MINUTES : CANARY_EVERY_MINUTES) * 60_000;
  let publishError: string | undefined;
  if (due) {
    const canaryId = crypto.randomUUID();
    await db.execute(
      sql`INSERT INTO qstash_canaries (id, sent_at) VALUES (${canaryId}, ${now}::timestamptz)`,
    );
    try {
      const messageId = await queue.send({ canaryId, label: options.label });
      await db.execute(sql`UPDATE qstash_canaries SET message_id = ${messageId} WHERE id = ${canaryId}`);
    } catch (error) {
      // The error's own words: a PublishError already carries its cause's.
      publishError = (error instanceof Error ? error.message : String(error)).slice(0, 500);
      await db.execute(
        sql`UPDATE qstash_canaries SET publish_error = ${publishError} WHERE id = ${canaryId}`,
      );
    }
  }
  // Rows older than the newest arrival are history once CANARY_KEEP_DAYS old; the
  // newest arrival and every canary after it are what the state is read from.
  await db.execute(sql`DELETE FROM qstash_canaries
                        WHERE sent_at < ${now}::timestamptz - make_interval(days => ${CANARY_KEEP_DAYS})
                          AND sent_at < (SELECT max(sent_at) FROM qstash_canaries WHERE arrived_at IS NOT NULL)`);
  const state = due ? await readCanaryState(db, now) : before;
  const late = isLate(state);
  let raised = false;
  let resolved = false;
  if (late) {
    const [row] = await queryRows<{ new: boolean }>(
      db,
      sql`INSERT INTO outbox_alerts (kind, message, details)
          VALUES ('jobs.not_arriving', ${notArrivingText(state, options.publicUrl)},
                  jsonb_build_object('waitingSince', ${isoTime(sql`${state.waiting_since}::timestamptz`)},
                                     'canaries', ${state.waiting}::int,
                                     'lastArrivedAt', ${isoTime(sql`${state.last_arrived_at}::timestamptz`)},
                                     'url', ${jobUrl(options.publicUrl, CANARY_JOB)}::text,
                                     'publishError', ${state.publish_error}::text,
                                     'answer', ${state.answer}::text))
          ON CONFLICT (kind) WHERE resolved_at IS NULL AND kind = 'jobs.not_arriving'
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING xmax = 0 AS new`,
    );
    raised = row?.new ?? false;
  } else if (state.waiting_since === null) {
    // Only an arrival ends it: a canary sent and not yet due leaves an open alert as it was.
    const rows = await queryRows<{ id: number }>(
      db,
      sql`UPDATE outbox_alerts
             SET resolved_at = now(),
                 message = format('jobs reach this Worker again: a canary job sent through QStash arrived at %s '
                                  '(none sent from %s until then had)',
                                  ${utcText(sql`${state.last_arrived_at}::timestamptz`)},
                                  ${utcText(sql`(details->>'waitingSince')::timestamptz`)})
           WHERE kind = 'jobs.not_arriving' AND resolved_at IS NULL
          RETURNING id`,
    );
    resolved = rows.length > 0;
  }
  return {
    sent: due,
    ...(publishError === undefined ? {} : { publishError }),
    waitingSince: state.waiting_since,
    late,
    raised,
    resolved,
  };
}

/**
 * The canaries' state in one read: when the newest was sent, the oldest one sent
 * after the newest arrival (waiting since then) and how many, and what the waiting
 * ones say went wrong (the newest publish error, the newest dead letter's answer).
 */
async function readCanaryState(db: Db, now: Date): Promise<CanaryState> {
  const [row] = await queryRows<CanaryState>(
    db,
    sql`WITH last AS (SELECT max(sent_at) AS sent_at, max(arrived_at) AS arrived_at
                        FROM qstash_canaries WHERE arrived_at IS NOT NULL),
             waiting AS (SELECT c.* FROM qstash_canaries c, last
                          WHERE c.arrived_at IS NULL AND c.sent_at > coalesce(last.sent_at, '-infinity'))
        SELECT (SELECT max(sent_at) FROM qstash_canaries) AS latest_sent_at,
               (SELECT min(sent_at) FROM waiting) AS waiting_since,
               (SELECT count(*)::int FROM waiting) AS waiting,
               (SELECT count(*)::int FROM waiting
                 WHERE sent_at <= ${now}::timestamptz - make_interval(mins => ${CANARY_GRACE_MINUTES})) AS overdue,
               (SELECT arrived_at FROM last) AS last_arrived_at,
               (SELECT publish_error FROM waiting WHERE publish_error IS NOT NULL
                 ORDER BY sent_at DESC LIMIT 1) AS publish_error,
               (SELECT answer FROM waiting WHERE answer IS NOT NULL ORDER BY sent_at DESC LIMIT 1) AS answer`,
  );
  const date = (value: Date | null | undefined) => (value == null ? null : asDate(value));
  return {
    latest_sent_at: date(row?.latest_sent_at),
    waiting_since: date(row?.waiting_since),
    waiting: row?.waiting ?? 0,
    overdue: row?.overdue ?? 0,
    last_arrived_at: date(row?.last_arrived_at),
    publish_error: row?.publish_error ?? null,
    answer: row?.answer ?? null,
  };
}

/** A Date as an alert's message says it to a person: `2026-12-06 08:01:12 UTC`. */
function utc(at: Date): string {
  return `${at.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** The jobs.not_arriving alert's message: since when, why as far as QStash knows, and what to do about it. */
function notArrivingText(state: CanaryState, publicUrl: string): string {
  const url = jobUrl(publicUrl, CANARY_JOB);
  const since = state.waiting_since ? utc(state.waiting_since) : "?";
  const last = state.last_arrived_at
    ? `the last to arrive did at ${utc(state.last_arrived_at)}`
    : "none ever has";
  const head =
    `jobs do not reach this Worker: no canary job the cron sweep sent through QStash to ${url} since ${since} ` +
    `has arrived (${state.waiting} sent, one every ${CANARY_LATE_AFTER_MINUTES} min); ${last}.`;
  return `${head} ${notArrivingWhy(state)}`;
}

/** Why, by what QStash said of the newest waiting canaries, and what to check. */
function notArrivingWhy(state: Pick<CanaryState, "publish_error" | "answer">): string {
  const stuck =
    "Every job fails the same way: QStash retries them, then keeps them in its dead-letter queue.";
  if (state.publish_error !== null)
    return (
      `QStash did not even take the newest: ${state.publish_error}. Until it does, no job is published either ` +
      "(writes still commit, and the relay keeps them): check QSTASH_URL and QSTASH_TOKEN (a 401 from QStash " +
      "itself is the token) and QStash's status"
    );
  const answer = state.answer;
  if (answer === null)
    return (
      "QStash reports no failure for them: something at that URL answered, and it was not this Worker (or they " +
      "still wait in QStash). PUBLIC_URL is likely not this Worker's address, and every job, its body included, " +
      "goes there: set it to this Worker's address, and see what QStash's logs say of the canaries' messages"
    );
  if (answer.startsWith(NO_ANSWER))
    return `QStash could not reach that URL (${answer}). Check that PUBLIC_URL is this Worker's address and that it is up. ${stuck}`;
  if (answer.includes(FOREIGN_REFUSAL))
    return (
      `The Worker at that URL refused it as another deployment's canary (answered ${answer}): PUBLIC_URL names ` +
      "another deployment's Worker, which runs this deployment's jobs against its own database. Set PUBLIC_URL to " +
      "this Worker's own address"
    );
  if (answer.startsWith("401"))
    return (
      `The Worker refused QStash's signature (answered ${answer}): QSTASH_CURRENT_SIGNING_KEY and ` +
      `QSTASH_NEXT_SIGNING_KEY are not this QStash account's. ${stuck}`
    );
  return `QStash's delivery failed (answered ${answer}). Check that PUBLIC_URL is this Worker's address. ${stuck}`;
}

/** How a canary's dead letter without a status is kept in `answer`. */
const NO_ANSWER = "no answer";

/** What the canary route says of a canary this database did not send (jobs-canary.ts), found again in its answer. */
export const FOREIGN_REFUSAL = "not this deployment's canary";

/** How a canary's arrival was taken: this database's, or another deployment's. */
export type CanaryArrival = { ours: true } | { ours: false; message: string };

/**
 * `/jobs/_canary`'s work, after QStash's signature is checked. A canary this
 * database sent is marked arrived. One it never sent is another deployment's, whose
 * jobs reach this Worker: its PUBLIC_URL names this one, and QStash signs its jobs
 * with keys this Worker takes. Each of its jobs runs here, against this database, so
 * that is raised as `jobs.foreign`, one open per label counting its canaries.
 */
export async function canaryArrived(db: Db, body: CanaryBody, ownLabel: string): Promise<CanaryArrival> {
  const rows = await queryRows<{ id: string }>(
    db,
    sql`UPDATE qstash_canaries SET arrived_at = coalesce(arrived_at, now()) WHERE id = ${body.canaryId} RETURNING id`,
  );
  if (rows.length > 0) return { ours: true };
  const same = body.label === ownLabel;
  const what = `of another deployment (label ${body.label}${same ? ", the same as this deployment's" : ""}) reached this Worker`;
  const rest =
    "that deployment's jobs are published to this Worker's URL and signed with keys it takes (the same QStash " +
    "account), so each of them runs here, against this database: its events become this deployment's mails and " +
    "webhooks. Set that deployment's PUBLIC_URL to its own Worker's address" +
    (same
      ? " (its label is this one's because it is made from PUBLIC_URL). A canary this database sent before it " +
        "was restored from a backup arrives the same way, once"
      : "");
  // The count and the latest time lead, as job.failed's do: the alert is one per label.
  const text = (n: SQL) =>
    sql`format('%s canary job%s %s, the latest at %s: %s', ${n}, CASE WHEN ${n} = 1 THEN '' ELSE 's' END,
               ${what}::text, ${utcText(sql`now()`)}, ${rest}::text)`;
  const count = sql`((outbox_alerts.details->>'canaries')::int + 1)`;
  const [row] = await queryRows<{ message: string }>(
    db,
    sql`INSERT INTO outbox_alerts (kind, message, details)
        VALUES ('jobs.foreign', ${text(sql`1`)},
                jsonb_build_object('label', ${body.label}::text, 'canaries', 1,
                                   'lastCanaryId', ${body.canaryId}::text, 'lastAt', ${isoTime(sql`now()`)}))
        ON CONFLICT ((details->>'label')) WHERE resolved_at IS NULL AND kind = 'jobs.foreign'
        DO UPDATE SET message = ${text(count)},
                      details = outbox_alerts.details || jsonb_build_object(
                        'canaries', ${count}, 'lastCanaryId', ${body.canaryId}::text, 'lastAt', ${isoTime(sql`now()`)})
        RETURNING message`,
  );
  return { ours: false, message: row?.message ?? `a canary job ${what}: ${rest}` };
}

/**
 * A canary's dead letter (QStash gave up on it: retries are 0, so at its first
 * failed attempt): what the Worker answered goes on its row, where the
 * jobs.not_arriving alert reads it. Answers whether the canary was this
 * database's: another deployment's, on the same label and URL (its PUBLIC_URL is
 * ours), is its own sweep's to read, and the reason its alert can give.
 */
export async function recordCanaryAnswer(
  db: Db,
  letter: { body: string; responseStatus: number | null; responseBody: string | null },
): Promise<boolean> {
  let canaryId: unknown;
  try {
    canaryId = (JSON.parse(letter.body) as Partial<CanaryBody>).canaryId;
  } catch {
    return false;
  }
  if (typeof canaryId !== "string" || !isUuid(canaryId)) return false;
  const said = letter.responseBody ? letter.responseBody.replace(/\s+/g, " ").slice(0, 300) : "";
  const answer =
    letter.responseStatus === null || letter.responseStatus === 0
      ? `${NO_ANSWER}${said ? `: ${said}` : ""}`
      : `${letter.responseStatus}${said ? ` ${said}` : ""}`;
  const ours = await queryRows<{ id: string }>(
    db,
    sql`UPDATE qstash_canaries SET answer = CASE WHEN arrived_at IS NULL THEN ${answer} ELSE answer END
         WHERE id = ${canaryId} RETURNING id`,
  );
  return ours.length > 0;
}

/** The canary as `stats`, `GET /admin/stats` and the overview say it. */
export interface CanaryView {
  /** When the newest canary to arrive did; null before the first. */
  lastArrivedAt: Date | null;
  /** The oldest canary sent after it, not arrived yet; null when none waits. */
  waitingSince: Date | null;
  /** Two canaries in a row have not arrived (isLate): jobs do not reach the Worker. */
  late: boolean;
  /**
   * Open jobs.foreign alerts: another deployment's jobs reach this Worker, which the
   * line must not call well while it says "arriving" (a walkthrough's overview did).
   */
  foreignLabels: number;
  /** canaryText's sentence (ISO times). */
  text: string;
}

export async function canaryView(db: Db, now = new Date()): Promise<CanaryView> {
  const [state, [foreign]] = await Promise.all([
    readCanaryState(db, now),
    queryRows<{ n: number }>(
      db,
      sql`SELECT count(*)::int AS n FROM outbox_alerts WHERE kind = 'jobs.foreign' AND resolved_at IS NULL`,
    ),
  ]);
  const view = {
    lastArrivedAt: state.last_arrived_at,
    waitingSince: state.waiting_since,
    late: isLate(state),
    foreignLabels: foreign?.n ?? 0,
  };
  return { ...view, text: canaryText(view) };
}

/** Two canaries in a row have not arrived, the newer given CANARY_GRACE_MINUTES (the older, five more). */
function isLate(state: Pick<CanaryState, "overdue">): boolean {
  return state.overdue >= 2;
}

/**
 * Whether QStash's jobs reach the Worker, as the newest canaries say, after a
 * "jobs from QStash" label (`stats`, the overview); `time` writes a time the caller's way.
 */
export function canaryText(
  view: Pick<CanaryView, "lastArrivedAt" | "waitingSince" | "late" | "foreignLabels">,
  time: (d: Date) => string = (d) => d.toISOString(),
): string {
  const foreign =
    view.foreignLabels > 0
      ? `; and ANOTHER DEPLOYMENT's jobs reach this Worker too (${view.foreignLabels} open jobs.foreign alert${view.foreignLabels === 1 ? "" : "s"} name${view.foreignLabels === 1 ? "s" : ""} it)`
      : "";
  return canaryState(view, time) + foreign;
}

function canaryState(
  view: Pick<CanaryView, "lastArrivedAt" | "waitingSince" | "late">,
  time: (d: Date) => string,
): string {
  const last = view.lastArrivedAt ? `the last to arrive did at ${time(view.lastArrivedAt)}` : "none ever has";
  if (view.late && view.waitingSince)
    return (
      `NOT ARRIVING: no canary the cron sweep sent through QStash since ${time(view.waitingSince)} has reached ` +
      `this Worker, and ${last} (the jobs.not_arriving alert says why, as far as QStash knows)`
    );
  if (view.waitingSince) return `a canary sent at ${time(view.waitingSince)} is on its way; ${last}`;
  if (view.lastArrivedAt)
    return `arriving: the cron sweep's last canary arrived at ${time(view.lastArrivedAt)}`;
  return `no canary sent yet: the cron sweep sends one every ${CANARY_EVERY_MINUTES} min, to tell whether jobs reach this Worker`;
}
