import { sql } from "drizzle-orm";
import type { Db } from "./db.ts";
import { sweepRuns } from "./schema.ts";

/**
 * Minutes without a finished sweep after which every view says the sweep is late
 * (ADR 0040), for a cron that runs each minute: five is four runs missed, not one
 * slow one (a sweep's budget is SWEEP_BUDGET_MS, well under a minute). A coarser
 * cron is given four of its own periods: sweepLateAfterMinutes.
 */
export const SWEEP_LATE_AFTER_MINUTES = 5;

/**
 * The period of a cron expression, in minutes, when it is one of the forms a sweep's
 * schedule takes: `* * * * *` (1), `*\/N * * * *` with N dividing 60 (N), `M * * * *`
 * (60). Undefined for any other: hours, days or lists make the gaps uneven.
 */
export function cronPeriodMinutes(cron: string): number | undefined {
  const fields = cron.trim().split(/\s+/);
  if (fields.length !== 5 || fields.slice(1).some((f) => f !== "*")) return undefined;
  const minute = fields[0]!;
  if (minute === "*") return 1;
  if (/^\d{1,2}$/.test(minute) && Number(minute) < 60) return 60;
  const step = /^\*\/(\d{1,2})$/.exec(minute)?.[1];
  const n = step === undefined ? NaN : Number(step);
  return Number.isInteger(n) && n >= 1 && 60 % n === 0 ? n : undefined;
}

/**
 * When the sweep counts as late under the cron it last ran with: four of its periods
 * and one minute more (five for a cron each minute), never less than
 * SWEEP_LATE_AFTER_MINUTES. A walkthrough's `*\/10` cron was called late for most of
 * every period. A cron whose period is not read here, or none recorded, gets the
 * every-minute figure.
 */
export function sweepLateAfterMinutes(cron: string | null): number {
  const period = cron === null ? undefined : cronPeriodMinutes(cron);
  return period === undefined ? SWEEP_LATE_AFTER_MINUTES : Math.max(SWEEP_LATE_AFTER_MINUTES, 4 * period + 1);
}

/** The cron sweep's last run as `sweep_runs` holds it; null before the first. */
export type SweepRun = typeof sweepRuns.$inferSelect;

/** Called at a sweep's end: it finished, in `durationMs`, with that retention, run by that cron. */
export async function recordSweepFinished(
  db: Db,
  run: { durationMs: number; retentionDays: number; cron: string | null },
): Promise<void> {
  const set = { durationMs: run.durationMs, retentionDays: run.retentionDays, cron: run.cron };
  await db
    .insert(sweepRuns)
    .values({ id: 1, finishedAt: sql`now()`, ...set })
    .onConflictDoUpdate({ target: sweepRuns.id, set: { finishedAt: sql`now()`, ...set } });
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
  /** The cron expression the last finished sweep ran by (Cloudflare's `controller.cron`). */
  cron: string | null;
  /** No sweep has finished for sweepLateAfterMinutes(cron), or ever. */
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
    cron: run?.cron ?? null,
    late: trouble?.late ?? false,
    trouble: trouble?.text ?? null,
  };
}

/**
 * Why the sweep needs looking at, in sentences, or undefined while it keeps
 * finishing. `late`: none has finished for sweepLateAfterMinutes (or ever);
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
  const cron = run?.cron ?? null;
  const lateAfter = sweepLateAfterMinutes(cron);
  if (finishedAt === null || now.getTime() - finishedAt.getTime() > lateAfter * 60_000) {
    // A coarse cron's period is said: "late" after 41 minutes needs its reason.
    const period =
      lateAfter > SWEEP_LATE_AFTER_MINUTES
        ? ` (its cron, ${cron}, runs one every ${cronPeriodMinutes(cron!)} min)`
        : "";
    const since = finishedAt
      ? `No cron sweep has finished since ${time(finishedAt)}${period}.`
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
