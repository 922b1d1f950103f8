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

/** The sweep's last run as `stats` and `GET /admin/stats` answer it, its reading included. */
export interface SweepView {
  finishedAt: Date | null;
  durationMs: number | null;
  retentionDays: number | null;
  failedAt: Date | null;
  failure: string | null;
  /** No sweep has finished for SWEEP_LATE_AFTER_MINUTES, or ever. */
  late: boolean;
  /** sweepTrouble's sentences (ISO times), null while sweeps keep finishing. */
  trouble: string | null;
}

export async function sweepView(db: Db, now = new Date()): Promise<SweepView> {
  const run = await readSweepRun(db);
  const trouble = sweepTrouble(run, now);
  return {
    finishedAt: run?.finishedAt ?? null,
    durationMs: run?.durationMs ?? null,
    retentionDays: run?.retentionDays ?? null,
    failedAt: run?.failedAt ?? null,
    failure: run?.failure ?? null,
    late: trouble?.late ?? false,
    trouble: trouble?.text ?? null,
  };
}

/**
 * Why the sweep needs looking at, in sentences, or undefined while it keeps
 * finishing. `late`: none has finished for SWEEP_LATE_AFTER_MINUTES (or ever);
 * otherwise the last run failed after one that finished, which the next run may
 * well not repeat (a database restart fails one). A run stops at the step that
 * fails (`failure` names it), so the steps before it still ran. `time` writes a
 * time the caller's way.
 */
export function sweepTrouble(
  run: SweepRun | null,
  now: Date,
  time: (d: Date) => string = (d) => d.toISOString(),
): { late: boolean; text: string } | undefined {
  const failed =
    run?.failedAt && (!run.finishedAt || run.failedAt > run.finishedAt)
      ? `failed at ${time(run.failedAt)} ${run.failure ?? "(no message)"}`
      : undefined;
  const finishedAt = run?.finishedAt ?? null;
  if (finishedAt === null || now.getTime() - finishedAt.getTime() > SWEEP_LATE_AFTER_MINUTES * 60_000) {
    const since = finishedAt
      ? `No cron sweep has finished since ${time(finishedAt)}.`
      : "No cron sweep has finished yet.";
    return {
      late: true,
      text: failed
        ? `${since} The last one ${failed}. Each sweep stops at the step that fails: the steps after it have not run since.`
        : `${since} Until one does, lost kicks are not repaired, alerts other than the relay's are neither ` +
          "raised nor resolved, and retention deletes nothing: check the Worker's cron trigger " +
          "(wrangler.toml [triggers] crons) and its logs.",
    };
  }
  if (!failed) return undefined;
  return {
    late: false,
    text: `The last sweep ${failed}; the one before finished at ${time(finishedAt)}, and the next one tries again.`,
  };
}

/** What the sweep's retention deletes, for the views that say the RETENTION_DAYS it ran with. */
export function retentionText(days: number | null): string {
  return (
    "what has finished (fanned-out events, webhook deliveries, resolved alerts, settled job failures, " +
    `mail records) is deleted after ${days ?? "?"} days (RETENTION_DAYS)`
  );
}
