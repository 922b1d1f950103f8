import { describe, expect, it } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import { recordJobFailure } from "../../src/domain/job-failures/record.ts";
import { runCli } from "../support/cli.ts";
import { useTestDatabase } from "../support/db.ts";
import { failedJob, relayJobBody } from "../support/job-failures.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// After an outage, resolving the job.failed alerts must not make the jobs they
// named look answered: a walkthrough resolved 71 of them and every stat read 0
// while 5 mails were still unsent (and retention would later delete them).
const t = useTestDatabase();
const env = () => ({ DATABASE_URL: t.url });

async function failedMail(): Promise<void> {
  const body = relayJobBody("notify.mail");
  await recordJobFailure(
    t.db as unknown as Db,
    failedJob({
      // Its event id comes from the body, as the callback's recording takes it.
      eventId: (JSON.parse(body) as { event: { id: string } }).event.id,
      body,
      responseBody: '{"error":{"message":"mail API answered 503: provider down"}}',
    }),
  );
}

describe("job failures still owed", () => {
  it("stats count them, and resolving their alerts says they are still not retried", async () => {
    await failedMail();
    await failedMail();

    const before = await runCli(["stats", "--json"], env());
    // One alert counts both: they are the same subscription's (ADR 0037).
    expect(JSON.parse(before.stdout)).toMatchObject({ openAlerts: 1, jobFailuresNotRetried: 2 });

    const resolved = await runCli(["alerts", "resolve", "--kind", "job.failed"], env());
    expect(resolved.code).toBe(0);
    expect(resolved.stdout.trim()).toBe(
      "resolved 1 job.failed alert; 2 job failures are still not retried: `job-failures retry --all` sends " +
        "them again (past RETENTION_DAYS the sweep deletes a failure whose alert was resolved)",
    );

    // Asked again, with none open: still says what is owed.
    const again = await runCli(["alerts", "resolve", "--kind", "job.failed"], env());
    expect(again.stdout.trim()).toBe(
      "no open job.failed alert; open ones: none; 2 job failures are still not retried: `job-failures retry --all` " +
        "sends them again (past RETENTION_DAYS the sweep deletes a failure whose alert was resolved)",
    );

    const after = await runCli(["stats"], env());
    expect(after.stdout).toMatch(/^open alerts\s+0$/m);
    expect(after.stdout).toMatch(
      /^job failures\s+2 not retried \(job-failures retry --all sends them again\)$/m,
    );

    const app = appOverTestDatabase(t);
    const admin = { headers: { authorization: `Bearer ${bindings().ADMIN_TOKEN}` } };
    const res = await call(app, bindings({ DATABASE_URL: t.url }), "GET", "/admin/stats", undefined, admin);
    expect(res.body.stats).toMatchObject({ openAlerts: 0, jobFailuresNotRetried: 2 });
    // And the jobs QStash holds, as the sweep last read them (none read here).
    await t.pool.query(
      `INSERT INTO subscription_wait_lists
              (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('webhook.fanout', 7, 10, 10, true, '2026-12-06T12:00:00Z', '2026-12-06T12:20:00Z')
       ON CONFLICT (subscription) DO UPDATE SET waiting = 7, paused = true`,
    );
    const read = await call(app, bindings({ DATABASE_URL: t.url }), "GET", "/admin/stats", undefined, admin);
    expect(read.body.stats.waitLists).toEqual([
      {
        subscription: "webhook.fanout",
        waiting: 7,
        parallelism: 10,
        inFlight: 10,
        paused: true,
        waitingSince: "2026-12-06T12:00:00.000Z",
        checkedAt: "2026-12-06T12:20:00.000Z",
        unreadSince: null,
        unreadError: null,
      },
    ]);
    await t.pool.query("DELETE FROM subscription_wait_lists");
  });
});
