import { drizzle } from "drizzle-orm/node-postgres";
import { describe, expect, it } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import {
  causeOf,
  lastAnswerOf,
  recordJobFailure,
  recordJobFailures,
} from "../../src/domain/job-failures/record.ts";
import { useTestDatabase } from "../support/db.ts";
import { failedJob } from "../support/job-failures.ts";

// A failed job's alert says what the subscriber said went wrong: the status QStash
// saw is our job route's own 500, which names no cause.

/** What a job.failed alert ends with: what answers it. */
const SENDS_IT =
  ". Once the subscriber works, Retry on the job failures page (job-failures retry) sends it again";
const SENDS_THEM =
  ". Once the subscriber works, Retry on the job failures page (job-failures retry) sends them again";

const t = useTestDatabase();

async function alertFor(responseBody: string | null, status: number | null = 500): Promise<string> {
  // Each its own alert: a failure of a subscription with one open would fold into it.
  await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
  const { messageId } = failedJob();
  await recordJobFailure(t.db as unknown as Db, failedJob({ messageId, status, responseBody }));
  const { rows } = await t.pool.query(
    "SELECT message FROM outbox_alerts WHERE kind = 'job.failed' AND details->>'messageId' = $1",
    [messageId],
  );
  return rows[0].message;
}

describe("a job.failed alert's cause", () => {
  it("is the job route's error message: the mail provider's outage, not only our 500", async () => {
    const envelope = JSON.stringify({
      error: { code: "job_failed", message: "mail API answered 503: provider down", requestId: "r1" },
    });
    expect(await alertFor(envelope)).toMatch(
      /^job msg_\S+ for notify\.mail failed after 5 retries \(last status 500: mail API answered 503: provider down\)\. Once the subscriber works, Retry on the job failures page \(job-failures retry\) sends it again$/,
    );
  });

  it("says what a 401 from this Worker's own job route means: QStash's delivery refused, not a subscriber down", async () => {
    // Wrong signing keys or a PUBLIC_URL that is not this Worker: the only alert, hours
    // later, read "Once the subscriber works" (the config walkthrough).
    const envelope = JSON.stringify({
      error: { code: "UNAUTHORIZED", message: "invalid Upstash-Signature", requestId: "r1" },
    });
    expect(await alertFor(envelope, 401)).toMatch(
      new RegExp(
        "^job msg_\\S+ for notify\\.mail failed after 5 retries \\(last status 401: invalid Upstash-Signature\\)\\. " +
          "A 401 is this Worker refusing QStash's delivery: check QSTASH_CURRENT_SIGNING_KEY, " +
          "QSTASH_NEXT_SIGNING_KEY and that PUBLIC_URL is this Worker's" +
          SENDS_IT.replace(/[.()]/g, "\\$&") +
          "$",
      ),
    );
    // Any other status says nothing of it.
    expect(await alertFor(envelope, 500)).not.toContain("A 401");
  });

  it("is any other body as it is, on one line and cut short; none without a body", async () => {
    const html = `<html>\n  <body>Bad gateway</body>\n</html>${"x".repeat(400)}`;
    const message = await alertFor(html, 502);
    expect(message).toContain("(last status 502: <html> <body>Bad gateway</body> </html>xxx");
    expect(message.endsWith(`x…)${SENDS_IT}`)).toBe(true);
    // The cause is cut short; what answers the alert follows it whole.
    expect(message.length - SENDS_IT.length).toBeLessThan(300);
    expect(await alertFor(null, null)).toMatch(/\(no answer\)\. Once the subscriber works/);
    expect(await alertFor("  ")).toMatch(/\(last status 500\)\. Once the subscriber works/);
  });

  it("reads as operators see it, in the CLI and the dashboard", () => {
    expect(
      lastAnswerOf({ status: 500, responseBody: '{"error":{"message":"mail API answered 429"}}' }, 60),
    ).toBe("500: mail API answered 429");
    expect(lastAnswerOf({ status: null, responseBody: null }, 60)).toBe("no answer");
    // JSON that is not our envelope is shown as it came.
    expect(causeOf('{"ok":false}', 60)).toBe('{"ok":false}');
    expect(causeOf("null", 60)).toBe("null");
    expect(causeOf("a".repeat(70), 60)).toBe(`${"a".repeat(60)}…`);
  });
});

describe("recording failures again", () => {
  it("adds nothing for those recorded already, and takes no ids for them", async () => {
    const db = t.db as unknown as Db;
    const first = Array.from({ length: 3 }, () => failedJob());
    expect(await recordJobFailures(db, first)).toHaveLength(3);
    // The sweep's dead letters of the same jobs, with one new among them.
    const fresh = failedJob();
    expect(await recordJobFailures(db, [...first, fresh])).toEqual([fresh.messageId]);
    const { rows } = await t.pool.query(
      "SELECT id::int, message_id FROM job_failures WHERE message_id = ANY($1) ORDER BY id",
      [[...first, fresh].map((f) => f.messageId)],
    );
    const ids = rows.map((r) => r.id as number);
    expect(ids).toEqual([ids[0], ids[0]! + 1, ids[0]! + 2, ids[0]! + 3]);
    expect(rows[3].message_id).toBe(fresh.messageId);
  });
});

describe("one job.failed alert per subscription", () => {
  const db = () => t.db as unknown as Db;
  const openAlerts = async () =>
    (
      await t.pool.query(
        `SELECT id::int, subscription, message, details FROM outbox_alerts
          WHERE kind = 'job.failed' AND resolved_at IS NULL ORDER BY subscription`,
      )
    ).rows;

  it("counts a subscription's failed jobs in one alert that names the latest, and keeps its id", async () => {
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const mail = Array.from({ length: 3 }, () => failedJob());
    const index = failedJob({ subscription: "corpus.index", retried: 1 });
    // A sweep's batch: two subscriptions, and a letter twice.
    await recordJobFailures(db(), [...mail, index, mail[0]!]);
    const [indexAlert, mailAlert] = await openAlerts();
    expect(indexAlert.message).toBe(
      `job ${index.messageId} for corpus.index failed after 1 retry (last status 500)` + SENDS_IT,
    );
    expect(indexAlert.details.count).toBe(1);
    expect(mailAlert.details.count).toBe(3);
    const { rows: newest } = await t.pool.query(
      "SELECT id::int, message_id FROM job_failures WHERE subscription = 'notify.mail' ORDER BY id DESC LIMIT 1",
    );
    expect(mailAlert.details).toMatchObject({ messageId: newest[0].message_id, failureId: newest[0].id });
    expect(mailAlert.message).toBe(
      `3 jobs for notify.mail ran out of retries; the latest: job ${newest[0].message_id} failed after 5 retries (last status 500)` +
        SENDS_THEM,
    );

    // A failure callback later: folded in, the first failure's time kept, the cause its own.
    const later = failedJob({
      responseBody: '{"error":{"message":"mail API answered 503: provider down"}}',
      status: 500,
    });
    await recordJobFailure(db(), later);
    const [, folded] = await openAlerts();
    expect(folded.id).toBe(mailAlert.id);
    expect(folded.details).toMatchObject({
      count: 4,
      messageId: later.messageId,
      cause: "mail API answered 503: provider down",
      firstFailedAt: mailAlert.details.firstFailedAt,
    });
    expect(Date.parse(folded.details.lastFailedAt)).toBeGreaterThanOrEqual(
      Date.parse(mailAlert.details.lastFailedAt),
    );
    expect(folded.message).toBe(
      `4 jobs for notify.mail ran out of retries; the latest: job ${later.messageId} failed after 5 retries ` +
        "(last status 500: mail API answered 503: provider down)" +
        SENDS_THEM,
    );

    // Folding took no ids: the next alert raised is the next id.
    const { rows: raised } = await t.pool.query(
      "INSERT INTO outbox_alerts (kind, message) VALUES ('relay.lagging.test', 'm') RETURNING id::int",
    );
    expect(raised[0].id).toBe(mailAlert.id + 1);
  });

  it("counts every failure when callbacks on separate connections arrive at once", async () => {
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const connections = Array.from({ length: 6 }, () => drizzle(t.newPool(1)) as unknown as Db);
    const jobs = Array.from({ length: 30 }, () => failedJob());
    await Promise.all(jobs.map((job, i) => recordJobFailure(connections[i % connections.length]!, job)));
    const alerts = await openAlerts();
    expect(alerts.map((a) => [a.subscription, a.details.count])).toEqual([["notify.mail", 30]]);
  });
});
