import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { isoTime, queryRows } from "../webhooks/rows.ts";

/** A subscription's failed jobs that QStash is to try again, as the job route expects it to. */
export interface RetriesDue {
  subscription: string;
  jobs: number;
  /** When the soonest and the latest of those retries are expected (ISO 8601, UTC). */
  nextDueAt: string;
  lastDueAt: string;
}

/**
 * The retry tail: each subscription's jobs whose attempt failed with a retry left,
 * from `job_retries_due`. After an outage ends, these still wait for QStash's next
 * try, up to a day away, while nothing else counts them (they are not failures yet,
 * and QStash's wait lists hold only jobs behind flow control): `stats` said nothing
 * waited while 79 of 607 mails did (the alert walkthrough). Times are expected ones
 * (failing.ts, nextRetryDelaySeconds), which a dev QStash on a time scale beats.
 */
export async function readRetriesDue(db: Db): Promise<RetriesDue[]> {
  return queryRows<RetriesDue>(
    db,
    sql`SELECT subscription, count(*)::int AS jobs,
               ${isoTime(sql`min(due_at)`)} AS "nextDueAt", ${isoTime(sql`max(due_at)`)} AS "lastDueAt"
          FROM job_retries_due GROUP BY subscription ORDER BY subscription`,
  );
}

/** The retry tail as `stats` and the overview say it: "notify.mail 2 jobs, the next expected by …, the last by …". */
export function retriesDueText(
  due: RetriesDue[],
  at: (iso: string) => string = (iso) => iso,
): string | undefined {
  if (due.length === 0) return undefined;
  return due
    .map((d) =>
      d.jobs === 1
        ? `${d.subscription} 1 job, expected by ${at(d.nextDueAt)}`
        : `${d.subscription} ${d.jobs} jobs, the next expected by ${at(d.nextDueAt)}, the last by ${at(d.lastDueAt)}`,
    )
    .join("; ");
}
