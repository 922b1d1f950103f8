import { sql, type SQL } from "drizzle-orm";
import type { Db } from "../db.ts";
import { isoTime, queryRows, utcText } from "../webhooks/rows.ts";
import { owedFailure } from "./retry.ts";

/** Minutes a subscription's jobs must keep failing before the sweep raises `subscription.failing`. */
export const FAILING_ALERT_AFTER_MINUTES = 5;

/**
 * Minutes without a failed attempt, counted from the last retry QStash owes the
 * subscription's jobs (`job_retries_due`), after which a run of failures is over:
 * the alert resolves, and the next failure starts a new run. Counted from the last
 * failure alone, an outage with no new jobs resolved and raised again at each of
 * QStash's ever sparser retries (30 min, 6 h, a day apart).
 */
export const FAILING_QUIET_MINUTES = 15;

/** QStash's longest wait between two attempts: a day. */
const MAX_RETRY_DELAY_SECONDS = 86_400;

/**
 * Seconds until QStash's next attempt at a job whose attempt number `retried`
 * (Upstash-Retried: 0 for the first) just failed, or null when it was the last of
 * `retries`. QStash's default backoff is min(1 day, e^(2.5·n)) s "after the n-th
 * retry" (12 s, 2 min 28 s, 30 min, 6 h, 24 h); whether n counts this attempt is not
 * settled (the dev server reads it as `retried`, 1 s first), so this takes the later
 * reading, n = retried + 1: a retry expected too late keeps the alert open a little
 * longer, one expected too early lets it resolve while QStash still holds the job.
 * `retries` unknown (a subscription that leaves it to the plan): a retry is expected.
 */
export function nextRetryDelaySeconds(retried: number, retries: number | undefined): number | null {
  if (retries !== undefined && retried >= retries) return null;
  return Math.min(MAX_RETRY_DELAY_SECONDS, Math.ceil(Math.exp(2.5 * (retried + 1))));
}

/** Characters of the handler's error kept with the run. */
const ERROR_KEPT = 500;

/**
 * The job route's part, when a subscription's handler failed an attempt of job
 * `messageId`: counts it in the subscription's run of failures, or starts a new run
 * when the last one ended (a retried job succeeded since, or none failed for
 * FAILING_QUIET_MINUTES past the last retry due), and records when QStash tries this
 * job next, `retryInSeconds` from now (nextRetryDelaySeconds), or, when it has no
 * retry left (null), that it owes this job nothing more. One statement: the upsert
 * on the subscription's row, so concurrent failing jobs (up to the flow-control
 * limit at once) each count once, and the job's own row, which no other job writes.
 */
export async function noteFailedAttempt(
  db: Db,
  subscription: string,
  messageId: string,
  error: string,
  retryInSeconds: number | null,
): Promise<void> {
  // The job's own row: its next retry, or none (its last attempt failed).
  const jobRow =
    retryInSeconds === null
      ? sql`DELETE FROM job_retries_due WHERE message_id = ${messageId}`
      : sql`INSERT INTO job_retries_due (message_id, subscription, due_at)
            VALUES (${messageId}, ${subscription}, now() + make_interval(secs => ${retryInSeconds}))
            ON CONFLICT (message_id) DO UPDATE SET due_at = EXCLUDED.due_at`;
  // On the statement's snapshot: whether the run was over before this failure,
  // this job's previous due included.
  const ended = sql`(s.recovered_at IS NOT NULL OR ${quietSince(sql`now()`)})`;
  await db.execute(sql`
    WITH job AS (${jobRow}),
    -- A failure that starts the next run resolves the alert of the run it ends, worded
    -- from that run as the statement's snapshot has it. Left to the sweep, it read the
    -- new run's row: a walkthrough's alert that had counted 2,149 attempts resolved
    -- "recovered … after 2 failed job attempts", jobs in flight at the recovery having
    -- failed just after it.
    closed AS (
      UPDATE outbox_alerts a SET resolved_at = now(), message = ended.message
        FROM (SELECT s.subscription, ${endedRunMessage} AS message
                FROM subscription_failures s ${pending}
               WHERE s.subscription = ${subscription} AND ${ended}) ended
       WHERE a.kind = 'subscription.failing' AND a.resolved_at IS NULL AND a.subscription = ended.subscription
    )
    INSERT INTO subscription_failures AS s
           (subscription, streak_started_at, last_failed_at, attempts, last_error)
    VALUES (${subscription}, now(), now(), 1, ${error.slice(0, ERROR_KEPT)})
    ON CONFLICT (subscription) DO UPDATE SET
      streak_started_at = CASE WHEN ${ended} THEN now() ELSE s.streak_started_at END,
      attempts = CASE WHEN ${ended} THEN 1 ELSE s.attempts + 1 END,
      last_failed_at = now(), last_error = EXCLUDED.last_error, recovered_at = NULL`);
}

/** The last retry QStash owes run `s`'s subscription, if any (NULL when none). */
const lastRetryDue = sql`(SELECT max(d.due_at) FROM job_retries_due d WHERE d.subscription = s.subscription)`;

/**
 * Whether run `s` has been quiet for FAILING_QUIET_MINUTES by `now`: no attempt
 * failed, and no retry of its subscription's jobs was due (`retryDue`, lastRetryDue
 * or a column holding it), in that spell (greatest() skips a NULL).
 */
function quietSince(now: SQL, retryDue: SQL = lastRetryDue): SQL {
  return sql`greatest(s.last_failed_at, ${retryDue}) < ${now} - make_interval(mins => ${FAILING_QUIET_MINUTES})`;
}

/**
 * The job route's part when job `messageId`, which had failed before, succeeded
 * (QStash's retried count above 0, or an operator's retry of a job failure): the
 * subscription works again, so its run of failures is over, and QStash owes the job
 * nothing more. Only such jobs say so, so a healthy subscription's jobs pay nothing;
 * a first attempt that succeeds during an intermittent outage proves less.
 */
export async function noteRecovered(db: Db, subscription: string, messageId: string): Promise<void> {
  await db.execute(sql`
    WITH settled AS (DELETE FROM job_retries_due WHERE message_id = ${messageId})
    UPDATE subscription_failures SET recovered_at = now()
     WHERE subscription = ${subscription} AND recovered_at IS NULL`);
}

/** What one sweep's check of the subscriptions found. */
export interface FailingCheck {
  /** Subscriptions failing now, each with its one open alert. */
  failing: number;
  /** Those whose alert this check raised. */
  raised: string[];
  /** Those whose alert this check resolved: a retried job succeeded, or none failed for a while. */
  recovered: string[];
}

/**
 * What the sweep reads of run `s`'s subscription besides its row, once per row as
 * `k` (a LATERAL): `k.owed`, its failed jobs waiting for an operator's retry
 * (owedFailure), and `k.retry_due`, the last retry QStash owes it (lastRetryDue).
 * The messages name each several times; as subqueries they ran once per mention.
 */
const pending = sql`CROSS JOIN LATERAL (
  SELECT (SELECT count(*)::int FROM job_failures j
           WHERE j.subscription = s.subscription AND ${owedFailure(sql.raw("j"))}) AS owed,
         ${lastRetryDue} AS retry_due) k`;
const owed = sql.raw("k.owed");
const retryDue = sql.raw("k.retry_due");

/** "1 job" or "12 jobs", for a count in SQL. */
function jobsWord(count: SQL): SQL {
  return sql`(${count} || CASE WHEN ${count} = 1 THEN ' job' ELSE ' jobs' END)`;
}

/** "1 job … waits" or "12 jobs … wait": `verb` agreeing with the count. */
function waits(count: SQL): SQL {
  return sql`CASE WHEN ${count} = 1 THEN 'waits' ELSE 'wait' END`;
}

/**
 * How a `subscription.failing` alert reads once its run `s` is over (with `k`,
 * pending's figures): resolved saying why, so the alert no longer reads "is
 * failing". A job that succeeded is a recovery, and the jobs QStash still holds come
 * at their next retry; a quiet spell is not: a walkthrough's alert said "recovered"
 * while the provider was still down and QStash held nothing. The sweep words it so
 * when it finds the run over, and so does a failure that starts the next run before
 * a sweep has looked (noteFailedAttempt), from the run it ends.
 */
const endedRunMessage = sql`CASE WHEN s.recovered_at IS NOT NULL
    THEN format('subscription %s recovered (a job that had failed succeeded at %s) after %s '
                'failed job attempts since %s; jobs QStash is still retrying are delivered at '
                'their next retry',
                s.subscription, ${utcText(sql`s.recovered_at`)}, s.attempts,
                ${utcText(sql`s.streak_started_at`)})
    ELSE format('subscription %s stopped failing: no job failed for %s min%s, after %s failed '
                'job attempts since %s; none has succeeded since, so it may still be down',
                s.subscription, ${FAILING_QUIET_MINUTES}::int,
                CASE WHEN ${retryDue} > s.last_failed_at
                     THEN ' after the last retry due at ' || ${utcText(retryDue)}
                     ELSE '' END,
                s.attempts, ${utcText(sql`s.streak_started_at`)}) END
    -- Those that ran out of retries come back only when retried.
    || CASE WHEN ${owed} = 0 THEN ''
            ELSE '; ' || ${jobsWord(owed)} || ' that ran out of retries still '
                 || ${waits(owed)} || ' for a retry' END`;

/** When run `s` is quiet if no attempt fails meanwhile: FAILING_QUIET_MINUTES after its last failure. */
const quietAt = sql`(s.last_failed_at + make_interval(mins => ${FAILING_QUIET_MINUTES}))`;

/**
 * The cron sweep's watch on subscriptions whose jobs fail. QStash retries a failed
 * job on its backoff for hours (the dev server's five retries span about 6.7
 * hours), and only a job that runs out of them reaches our failure callback as a
 * `job.failed` alert: a walkthrough's mail provider was down with 355 failed
 * attempts in 30 s and no alert at all. So a subscription whose run of failures has
 * lasted `afterMinutes` and goes on (a failure or a retry due within
 * FAILING_QUIET_MINUTES, no retried job succeeded since) has one open
 * `subscription.failing` alert, with the count, since when, the latest error and
 * when the last retry is expected, as of the sweep that last looked; the sweep
 * resolves it once the run is over.
 *
 * One statement, as the webhook lag check (webhooks/lag.ts): the open alert is
 * updated where there is one and inserted where there is none, overlapping sweeps
 * meeting at the unique index on open alerts per subscription (migration 0021).
 */
export async function evaluateFailingSubscriptions(
  db: Db,
  options: { now: Date; afterMinutes?: number },
): Promise<FailingCheck> {
  const after = options.afterMinutes ?? FAILING_ALERT_AFTER_MINUTES;
  const now = sql`${options.now}::timestamptz`;
  const [row] = await queryRows<{ failing: number; raised: string[]; recovered: string[] }>(
    db,
    sql`WITH failing AS (
          SELECT s.subscription,
                 format('subscription %s is failing: %s job attempts failed since %s, the latest at %s: %s. '
                        '%s%s; a job that runs out of retries becomes a job failure to retry',
                        s.subscription, s.attempts, ${utcText(sql`s.streak_started_at`)},
                        ${utcText(sql`s.last_failed_at`)}, s.last_error,
                        -- Jobs that ran out of retries are not QStash's any more: a
                        -- walkthrough's alert said "QStash retries them" of 30 jobs that
                        -- were all job failures already.
                        -- Since ADR 0038 the retries still owed are known job by job: with
                        -- none due, saying "QStash retries any others" promised what no job had.
                        CASE WHEN ${owed} = 0 THEN 'QStash retries them'
                             WHEN ${retryDue} > ${now}
                             THEN ${jobsWord(owed)} || ' ran out of retries and ' || ${waits(owed)}
                                  || ' for a retry among the job failures; QStash retries the others'
                             -- Nothing left to try: say when the alert ends by itself.
                             ELSE ${jobsWord(owed)} || ' ran out of retries and ' || ${waits(owed)}
                                  || ' for a retry among the job failures; QStash owes none of its jobs another retry, '
                                  || 'so this alert resolves after ' || ${utcText(quietAt)}
                                  || ' unless another attempt fails' END,
                        CASE WHEN ${retryDue} > ${now}
                             THEN ', the last expected by ' || ${utcText(retryDue)} ELSE '' END) AS message,
                 jsonb_build_object('attempts', s.attempts,
                                    'failingSince', ${isoTime(sql`s.streak_started_at`)},
                                    'lastFailedAt', ${isoTime(sql`s.last_failed_at`)},
                                    'retryDueAt', ${isoTime(retryDue)},
                                    'lastError', s.last_error,
                                    'jobFailuresOwed', ${owed},
                                    'checkedAt', ${isoTime(now)}) AS details
            FROM subscription_failures s ${pending}
           WHERE s.recovered_at IS NULL AND NOT ${quietSince(now, retryDue)}
             AND s.streak_started_at <= ${now} - make_interval(mins => ${after})
        ),
        updated AS (
          UPDATE outbox_alerts a SET message = f.message, details = f.details
            FROM failing f
           WHERE a.kind = 'subscription.failing' AND a.resolved_at IS NULL AND a.subscription = f.subscription
          RETURNING f.subscription
        ),
        raised AS (
          INSERT INTO outbox_alerts (kind, subscription, message, details)
          SELECT 'subscription.failing', subscription, message, details
            FROM failing WHERE subscription NOT IN (SELECT subscription FROM updated)
          ON CONFLICT (subscription) WHERE resolved_at IS NULL AND kind = 'subscription.failing'
          DO UPDATE SET message = EXCLUDED.message, details = EXCLUDED.details
          RETURNING subscription, xmax = 0 AS new
        ),
        cleared AS (
          -- Resolved saying why (endedRunMessage).
          UPDATE outbox_alerts a SET resolved_at = now(),
                 message = coalesce((
                   SELECT ${endedRunMessage}
                     FROM subscription_failures s ${pending} WHERE s.subscription = a.subscription), a.message)
           WHERE a.kind = 'subscription.failing' AND a.resolved_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM failing f WHERE f.subscription = a.subscription)
          RETURNING a.subscription
        ),
        pruned AS (
          -- Retries due before the quiet spell decide nothing any more (quietSince):
          -- a job QStash no longer holds (deleted, or its answer never reached us)
          -- leaves its row behind.
          DELETE FROM job_retries_due
           WHERE due_at < ${now} - make_interval(mins => ${FAILING_QUIET_MINUTES})
        )
        SELECT (SELECT count(*)::int FROM failing) AS failing,
               ARRAY(SELECT subscription FROM raised WHERE new ORDER BY subscription) AS raised,
               ARRAY(SELECT subscription FROM cleared ORDER BY subscription) AS recovered`,
  );
  return { failing: row?.failing ?? 0, raised: row?.raised ?? [], recovered: row?.recovered ?? [] };
}
