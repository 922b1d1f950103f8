import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import {
  cronPeriodMinutes,
  readSweepRun,
  SWEEP_LATE_AFTER_MINUTES,
  sweepLateAfterMinutes,
  sweepTrouble,
  type SweepRun,
} from "../../src/domain/sweep-runs.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// ADR 0040: the cron sweep raises every alert but the relay's own, so a sweep that
// never runs (no cron trigger) or fails at every run cannot raise one about itself.
// It records its last run; the views read that. Against real Postgres: the failure
// below is the database's own (a table the sweep needs is gone).
const t = useTestDatabase();
const db = () => t.db as unknown as Db;

beforeEach(async () => {
  await t.pool.query("TRUNCATE sweep_runs");
});

let quiet: ReturnType<typeof vi.spyOn>[] = [];
beforeEach(() => {
  quiet = [
    vi.spyOn(console, "log").mockImplementation(() => undefined),
    vi.spyOn(console, "error").mockImplementation(() => undefined),
  ];
});
afterEach(() => quiet.forEach((s) => s.mockRestore()));

function sweep(env = {}, cron?: string) {
  return createScheduled(openTestPool(t.newPool(2)))(
    (cron === undefined ? {} : { cron }) as ScheduledController,
    bindings({ DATABASE_URL: t.url, ...env }),
    executionContext().ctx,
  );
}

describe("the cron sweep's record of its runs", () => {
  it("records when it finished, how long it took, the retention it ran with and the cron that ran it", async () => {
    expect(await readSweepRun(db())).toBeNull();
    const before = Date.now();
    await sweep({ RETENTION_DAYS: "14" }, "*/10 * * * *");
    const run = await readSweepRun(db());
    expect(run).toMatchObject({ retentionDays: 14, failedAt: null, failure: null, cron: "*/10 * * * *" });
    expect(run!.finishedAt!.getTime()).toBeGreaterThanOrEqual(before - 1000);
    expect(run!.durationMs).toBeGreaterThanOrEqual(0);
    expect(sweepTrouble(run, new Date())).toBeUndefined();
  });

  it("records a failed run and why, beside the last that finished; the next that finishes clears the trouble", async () => {
    await sweep();
    const finished = (await readSweepRun(db()))!.finishedAt;
    await t.pool.query("ALTER TABLE mail_sends RENAME TO mail_sends_away");
    try {
      // What the platform logs of the run: the same words, never drizzle's parameters.
      const thrown: Error = await Promise.resolve(sweep()).then(
        () => expect.fail("the sweep finished"),
        (e: Error) => e,
      );
      expect(thrown.message).toMatch(/^sweep failed in its "record retention" step: .*mail_sends/);
      expect(thrown.message).not.toMatch(/params:/);
    } finally {
      await t.pool.query("ALTER TABLE mail_sends_away RENAME TO mail_sends");
    }
    const run = await readSweepRun(db());
    expect(run!.finishedAt).toEqual(finished);
    // The database's words first; drizzle's own message was the statement and then
    // its parameters, which no log line here carries.
    // Which step stopped it first, then the database's words.
    expect(run!.failure).toMatch(
      /^in its "record retention" step: query failed: relation "mail_sends" does not exist \(42P01\); the statement/,
    );
    const line = quiet[1]!.mock.calls.find((c: unknown[]) => String(c[0]).startsWith("sweep failed"));
    expect(line?.[1]).toBe(run!.failure);
    expect(run!.failure).not.toMatch(/params:/);
    expect(sweepTrouble(run, new Date())).toEqual({
      late: false,
      text: expect.stringMatching(
        /^The last sweep failed at \S+ in its "record retention" step: .*mail_sends.*; the one before finished at \S+, and the next one tries again\.$/,
      ),
    });
    await sweep();
    expect(sweepTrouble(await readSweepRun(db()), new Date())).toBeUndefined();
  });
});

describe("what the views say of it", () => {
  const at = (iso: string) => new Date(iso);
  const run = (over: Partial<SweepRun>): SweepRun => ({
    id: 1,
    finishedAt: at("2026-12-06T12:00:00Z"),
    durationMs: 40,
    retentionDays: 30,
    failedAt: null,
    failure: null,
    cron: null,
    ...over,
  });
  const minutesAfter = (n: number) => new Date(at("2026-12-06T12:00:00Z").getTime() + n * 60_000);

  it("nothing while sweeps keep finishing; late, and what stops, once none has for a while", () => {
    expect(sweepTrouble(run({}), minutesAfter(SWEEP_LATE_AFTER_MINUTES))).toBeUndefined();
    expect(sweepTrouble(run({}), minutesAfter(SWEEP_LATE_AFTER_MINUTES + 1))).toEqual({
      late: true,
      text:
        "No cron sweep has finished since 2026-12-06T12:00:00.000Z. Until one does, lost kicks are not repaired, " +
        "alerts other than the relay's are neither raised nor resolved, and retention deletes nothing: " +
        "check the Worker's cron trigger (wrangler.toml [triggers] crons) and its logs.",
    });
  });

  it("under a coarser cron, late after four of its periods, and says so", () => {
    const every10 = run({ cron: "*/10 * * * *" });
    expect(sweepTrouble(every10, minutesAfter(41))).toBeUndefined();
    expect(sweepTrouble(every10, minutesAfter(42))).toEqual({
      late: true,
      text:
        "No cron sweep has finished since 2026-12-06T12:00:00.000Z (its cron, */10 * * * *, runs one every 10 min). " +
        "Until one does, lost kicks are not repaired, alerts other than the relay's are neither raised nor " +
        "resolved, and retention deletes nothing: check the Worker's cron trigger (wrangler.toml [triggers] " +
        "crons) and its logs.",
    });
    // Every minute, or a cron these views do not read: five minutes, as before.
    for (const cron of ["* * * * *", "0 3 * * *", "*/7 * * * *", null]) {
      expect(sweepTrouble(run({ cron }), minutesAfter(6))?.late).toBe(true);
    }
    expect(sweepTrouble(run({ cron: "0 * * * *" }), minutesAfter(4 * 60))).toBeUndefined();
  });

  it("reads the period of the crons a sweep is scheduled by", () => {
    expect(
      [
        "* * * * *",
        "*/5 * * * *",
        " */15  * * * * ",
        "0 * * * *",
        "*/7 * * * *",
        "0 3 * * *",
        "*/0 * * * *",
        "60 * * * *",
        "* * * *",
      ].map(cronPeriodMinutes),
    ).toEqual([1, 5, 15, 60, undefined, undefined, undefined, undefined, undefined]);
    expect([null, "* * * * *", "*/2 * * * *", "*/10 * * * *"].map(sweepLateAfterMinutes)).toEqual([
      5, 5, 9, 41,
    ]);
  });

  it("a sweep that never finished: late, with its failure when one was recorded", () => {
    expect(sweepTrouble(null, minutesAfter(0))?.text).toMatch(
      /^No cron sweep has finished yet\. Until one does/,
    );
    const failing = run({
      finishedAt: null,
      failedAt: at("2026-12-06T12:03:00Z"),
      failure: 'in its "dead letters" step: QStash answered 401',
    });
    expect(sweepTrouble(failing, minutesAfter(4), (d) => d.toISOString().slice(11, 16))).toEqual({
      late: true,
      text:
        'No cron sweep has finished yet. The last one failed at 12:03 in its "dead letters" step: QStash ' +
        "answered 401. Each sweep stops at the step that fails: the steps after it have not run since.",
    });
  });

  it("a failure before the last finished run is history, not trouble", () => {
    const recovered = run({ failedAt: at("2026-12-06T11:59:00Z"), failure: "connection terminated" });
    expect(sweepTrouble(recovered, minutesAfter(1))).toBeUndefined();
  });
});
