import { sql } from "drizzle-orm";
import type { Db } from "./db.ts";
import { sweepRuns } from "./schema.ts";

/**
 * Minutes without a finished sweep after which every view says the sweep is late
 * (ADR 0040): the cron runs each minute, so five is four runs missed, not one slow
 * one (a sweep's budget is SWEEP_BUDGET_MS, well under a minute).
 */
export const SWEEP_LATE_AFTER_MINUTES = 5;

/** The cron sweep's last run as `sweep_runs` holds it; null before the first. */
export type SweepRun = typeof sweepRuns.$inferSelect;

/** Called at a sweep's end: it finished, in `durationMs`, with that retention. */
export async function recordSweepFinished(
  db: Db,
  run: { durationMs: number; retentionDays: number },
): Promise<void> {
  await db
    .insert(sweepRuns)
    .values({ id: 1, finishedAt: sql`now()`, durationMs: run.durationMs, retentionDays: run.retentionDays })
    .onConflictDoUpdate({
      target: sweepRuns.id,
      set: { finishedAt: sql`now()`, durationMs: run.durationMs, retentionDays: run.retentionDays },
    });
}

/** Called when a sweep throws: when and why, beside the last one that finished. */
export async function recordSweepFailed(db: Db, failure: string): Promise<void> {
  await db
    .insert(sweepRuns)
    .values({ id: 1, failedAt: sql`now()`, failure })
    .onConflictDoUpdate({ target: sweepRuns.id, set: { failedAt: sql`now()`, failure } });
}

export async function readSweepRun(db: Db): Promise<SweepRun | null> {
  const [row] = await db.select().from(sweepRuns);
  return row ?? null;
}

/**
 * Why the sweep needs looking at, in words, or undefined while it keeps finishing.
 * `late`: none has finished for SWEEP_LATE_AFTER_MINUTES (or ever), so nothing it
 * does is being done; otherwise the last run failed after one that finished, which
 * the next run may well not repeat (a database restart fails one). `time` writes a
 * time the caller's way.
 */
export function sweepTrouble(
  run: SweepRun | null,
  now: Date,
  time: (d: Date) => string = (d) => d.toISOString(),
): { late: boolean; text: string } | undefined {
  const failed =
    run?.failedAt && (!run.finishedAt || run.failedAt > run.finishedAt)
      ? { at: run.failedAt, why: run.failure ?? "(no message)" }
      : undefined;
  const finishedAt = run?.finishedAt ?? null;
  if (finishedAt === null || now.getTime() - finishedAt.getTime() > SWEEP_LATE_AFTER_MINUTES * 60_000) {
    return {
      late: true,
      text:
        (finishedAt
          ? `no cron sweep has finished since ${time(finishedAt)}`
          : "no cron sweep has finished yet") +
        (failed ? `; the last one failed at ${time(failed.at)}: ${failed.why}` : "") +
        ": until one does, lost kicks are not repaired, alerts other than the relay's are neither raised nor " +
        "resolved, and retention deletes nothing; " +
        (failed
          ? "its log line says which step failed"
          : "check the Worker's cron trigger (wrangler.toml [triggers] crons) and its logs"),
    };
  }
  if (!failed) return undefined;
  return {
    late: false,
    text: `the last sweep failed at ${time(failed.at)} (the one before finished at ${time(finishedAt)}): ${failed.why}; the next one tries again`,
  };
}

/** What the sweep's retention deletes, for the views that say the RETENTION_DAYS it ran with. */
export function retentionText(days: number | null): string {
  return (
    "what has finished (fanned-out events, webhook deliveries, resolved alerts, settled job failures, " +
    `mail records) is deleted after ${days ?? "?"} days (RETENTION_DAYS)`
  );
}
