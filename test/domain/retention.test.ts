import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import { createApiKey } from "../../src/domain/api-keys/keys.ts";
import { recordJobFailure } from "../../src/domain/job-failures/record.ts";
import { RETENTION_BATCH, deleteOldRecords } from "../../src/domain/retention.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { failedJob } from "../support/job-failures.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// The tables nothing pruned before: alerts, job failures and mail records. Rows are
// aged by hand (their times set in the past) against real Postgres; the cut-off is
// RETENTION_DAYS, 30 here, before `now`.
const t = useTestDatabase();
const db = () => t.db as unknown as Db;
const now = new Date();
const daysAgo = (n: number) => new Date(now.getTime() - n * 86_400_000);
const cut = { olderThanDays: 30, now };

beforeEach(async () => {
  await t.pool.query("TRUNCATE outbox_alerts, job_failures, mail_sends");
});

async function alert(fields: { created: Date; resolved: Date | null; kind?: string }): Promise<number> {
  const { rows } = await t.pool.query(
    `INSERT INTO outbox_alerts (kind, message, created_at, resolved_at) VALUES ($1, 'm', $2, $3) RETURNING id::int`,
    [fields.kind ?? "relay.lagging.test", fields.created, fields.resolved],
  );
  return rows[0].id;
}

/**
 * A failure recorded as the callback does (counted by its subscription's open
 * `job.failed` alert), then aged, and the alert with it when the failure raised it.
 */
async function failure(name: string, received: Date): Promise<string> {
  const messageId = `msg_${name}_${crypto.randomUUID()}`;
  await recordJobFailure(db(), failedJob({ messageId, retried: 3 }));
  await t.pool.query("UPDATE job_failures SET received_at = $2 WHERE message_id = $1", [messageId, received]);
  await t.pool.query(
    `UPDATE outbox_alerts SET created_at = $2, details = details || jsonb_build_object('firstFailedAt', $3::text)
      WHERE kind = 'job.failed' AND resolved_at IS NULL AND details->>'messageId' = $1 AND (details->>'count')::int = 1`,
    [messageId, received, received.toISOString()],
  );
  return messageId;
}

async function mail(created: Date): Promise<string> {
  const eventId = crypto.randomUUID();
  await t.pool.query(
    `INSERT INTO mail_sends (subscription, event_id, recipient, subject_line, created_at, sent_at)
     VALUES ('notify.mail', $1, 'ops@example.com', 's', $2, $2)`,
    [eventId, created],
  );
  return eventId;
}

const ids = async (q: string) => (await t.pool.query(q)).rows.map((r) => Object.values(r)[0]);

describe("retention of alerts, job failures and mail records", () => {
  it("deletes alerts resolved before the cut-off; an open one stays however old", async () => {
    const oldResolved = await alert({ created: daysAgo(60), resolved: daysAgo(45) });
    const oldOpen = await alert({ created: daysAgo(60), resolved: null, kind: "job.failed" });
    // Raised long ago, resolved recently: kept until its resolution is old.
    const recentlyResolved = await alert({ created: daysAgo(60), resolved: daysAgo(2) });

    expect(await deleteOldRecords(db(), cut)).toEqual({ alerts: 1, jobFailures: 0, mailSends: 0 });
    expect(await ids("SELECT id::int FROM outbox_alerts ORDER BY id")).toEqual([oldOpen, recentlyResolved]);
    expect(oldResolved).toBeLessThan(oldOpen);
  });

  it("deletes old job failures that were retried or whose alert is answered; an unanswered one stays, retriable", async () => {
    const retried = await failure("retried", daysAgo(40));
    await t.pool.query(
      "UPDATE job_failures SET retried_at = $2, retry_message_id = 'msg_r1' WHERE message_id = $1",
      [retried, daysAgo(39)],
    );
    const answered = await failure("answered", daysAgo(40));
    await t.pool.query(
      "UPDATE outbox_alerts SET resolved_at = now() WHERE kind = 'job.failed' AND details->>'messageId' = $1",
      [answered],
    );
    // The alert that counted both is resolved: the next failure raises one of its own.
    const unanswered = await failure("unanswered", daysAgo(38));
    const recent = await failure("recent", daysAgo(3));
    await t.pool.query("UPDATE job_failures SET retried_at = now() WHERE message_id = $1", [recent]);

    const deleted = await deleteOldRecords(db(), cut);
    expect(deleted.jobFailures).toBe(2);
    expect(await ids('SELECT message_id FROM job_failures ORDER BY message_id COLLATE "C"')).toEqual(
      [unanswered, recent].sort(),
    );
  });

  it("keeps an old job failure whose retry was sent lately until the retry is delivered", async () => {
    const old = await failure("retried-now", daysAgo(40));
    // An operator's retry a moment ago: QStash holds it, its outcome not in yet.
    await t.pool.query(
      "UPDATE job_failures SET retried_at = now(), retry_message_id = 'msg_retry' WHERE message_id = $1",
      [old],
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE kind = 'job.failed'");
    // Its alert resolved, yet it stays: it went 15 s after the retry was sent, so the
    // retry's own failure lost its link to it.
    expect((await deleteOldRecords(db(), cut)).jobFailures).toBe(0);
    await t.pool.query("UPDATE job_failures SET retry_delivered_at = now() WHERE message_id = $1", [old]);
    expect((await deleteOldRecords(db(), cut)).jobFailures).toBe(1);
  });

  it("deletes mail records from before the cut-off", async () => {
    await mail(daysAgo(31));
    const kept = await mail(daysAgo(29));
    expect((await deleteOldRecords(db(), cut)).mailSends).toBe(1);
    expect(await ids("SELECT event_id FROM mail_sends")).toEqual([kept]);
  });

  it("goes on past ten batches while its time lasts: a backlog of 12,000 goes in one sweep", async () => {
    const total = 24 * RETENTION_BATCH + 7;
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message, created_at, resolved_at)
       SELECT 'relay.lagging.test', 'm', $1, $1 FROM generate_series(1, $2)`,
      [daysAgo(90), total],
    );
    // Ten batches a sweep (5,000 a minute) were outrun by a busy deployment's rows.
    expect((await deleteOldRecords(db(), cut)).alerts).toBe(total);
  });

  it("works in bounded batches: a backlog goes over several sweeps", async () => {
    const total = 2 * RETENTION_BATCH + 7;
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message, created_at, resolved_at)
       SELECT 'relay.lagging.test', 'm', $1, $1 FROM generate_series(1, $2)`,
      [daysAgo(90), total],
    );
    expect((await deleteOldRecords(db(), { ...cut, maxBatches: 1 })).alerts).toBe(RETENTION_BATCH);
    expect((await deleteOldRecords(db(), { ...cut, maxBatches: 1 })).alerts).toBe(RETENTION_BATCH);
    expect((await deleteOldRecords(db(), { ...cut, maxBatches: 1 })).alerts).toBe(7);
    expect(await ids("SELECT count(*)::int FROM outbox_alerts")).toEqual([0]);
  });
});

describe("the cron sweep", () => {
  const log = vi.spyOn(console, "log");
  beforeEach(() => {
    log.mockImplementation(() => undefined);
  });
  afterEach(() => log.mockReset());

  it("deletes them with RETENTION_DAYS and says how many", async () => {
    await alert({ created: daysAgo(20), resolved: daysAgo(12) });
    await mail(daysAgo(12));
    const retried = await failure("retried", daysAgo(12));
    await t.pool.query(
      "UPDATE job_failures SET retried_at = $2, retry_message_id = 'msg_r' WHERE message_id = $1",
      [retried, daysAgo(11)],
    );
    await mail(daysAgo(5));
    // Idempotency keys go after IDEMPOTENCY_KEY_HOURS, whatever RETENTION_DAYS says.
    const apiKey = (await createApiKey(db(), { scope: null, name: "retention" })).apiKey.id;
    for (const [name, hoursAgo] of [
      ["a day and an hour", 25],
      ["an hour", 1],
    ] as const)
      await t.pool.query(
        "INSERT INTO idempotency_keys (api_key_id, key, fingerprint, created_at) VALUES ($1, $2, 'f', $3)",
        [apiKey, name, new Date(now.getTime() - hoursAgo * 3_600_000)],
      );

    // Wrong sign-ins: only the last 20 minutes' are read by the lock-out (its window
    // and its lock); older ones were kept for ever unless that address signed in.
    await t.pool.query("TRUNCATE dashboard_login_failures");
    await t.pool.query(
      `INSERT INTO dashboard_login_failures (client, failed_at)
       SELECT '10.9.0.' || i, now() - make_interval(mins => CASE WHEN i <= 3 THEN 5 ELSE 21 END)
         FROM generate_series(1, 1200) i`,
    );

    const env = bindings({ DATABASE_URL: t.url, RETENTION_DAYS: "10" });
    // No QStash here: the sweep's QStash work says it stopped, the rest runs.
    await createScheduled(openTestPool(t.newPool(2)), () => now)(
      {} as ScheduledController,
      env,
      executionContext().ctx,
    );
    const line = String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
    expect(line).toContain(
      "retention past 10 d deleted 0 finished webhook deliveries, 1 alerts resolved by then, 1 settled job failures and 1 mail records;",
    );
    expect(await ids("SELECT count(*)::int FROM mail_sends")).toEqual([1]);
    expect(line).toContain(
      "deleted 1 idempotency keys older than 24 h and 1197 wrong sign-ins older than the lock-out reads;",
    );
    expect(await ids("SELECT client FROM dashboard_login_failures ORDER BY client")).toEqual([
      "10.9.0.1",
      "10.9.0.2",
      "10.9.0.3",
    ]);
    const { rows } = await t.pool.query("SELECT key FROM idempotency_keys WHERE api_key_id = $1", [apiKey]);
    expect(rows).toEqual([{ key: "an hour" }]);
  });
});
