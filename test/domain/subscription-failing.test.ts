import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { signJwt } from "../../infra/qstash-dev/signing.ts";
import type { Db } from "../../src/domain/db.ts";
import {
  evaluateFailingSubscriptions,
  FAILING_QUIET_MINUTES,
  nextRetryDelaySeconds,
  noteFailedAttempt,
} from "../../src/domain/job-failures/failing.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { insertJobFailure, jobRanOutOfRetries, relayJobBody } from "../support/job-failures.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { appOverTestDatabase, bindings, call, executionContext, openTestPool } from "../support/worker.ts";

// subscription.failing (ADR 0036): an alert while QStash is still retrying a
// subscription's failing jobs, hours before the first runs out of retries. Against
// real Postgres, concurrent attempts on connections of their own.
const t = useTestDatabase();
const db = () => t.db as unknown as Db;
const minutesAgo = (now: Date, n: number) => new Date(now.getTime() - n * 60_000);

beforeEach(async () => {
  await t.pool.query("TRUNCATE subscription_failures, job_retries_due, outbox_alerts, job_failures");
});

/**
 * A run of failures with its times set, as if its attempts had come then;
 * `retryDue`: one of its jobs (`msg_earlier`) has a retry due then.
 */
async function run(
  subscription: string,
  fields: { started: Date; last: Date; attempts: number; recovered?: Date; retryDue?: Date },
) {
  await t.pool.query(
    `INSERT INTO subscription_failures
            (subscription, streak_started_at, last_failed_at, attempts, last_error, recovered_at)
     VALUES ($1, $2, $3, $4, 'mail API answered 503: provider down', $5)`,
    [subscription, fields.started, fields.last, fields.attempts, fields.recovered ?? null],
  );
  if (fields.retryDue)
    await t.pool.query(
      "INSERT INTO job_retries_due (message_id, subscription, due_at) VALUES ('msg_earlier', $1, $2)",
      [subscription, fields.retryDue],
    );
}

/** Each job's retry due, in seconds from now (rounded), by message id. */
async function retriesDue(): Promise<Record<string, number>> {
  const { rows } = await t.pool.query<{ message_id: string; in_seconds: number }>(
    `SELECT message_id, round(extract(epoch FROM due_at - now()))::int AS in_seconds
       FROM job_retries_due ORDER BY message_id`,
  );
  return Object.fromEntries(rows.map((r) => [r.message_id, r.in_seconds]));
}

async function openAlerts() {
  const { rows } = await t.pool.query(
    `SELECT id::int, subscription, message, details FROM outbox_alerts
      WHERE kind = 'subscription.failing' AND resolved_at IS NULL ORDER BY subscription`,
  );
  return rows;
}

describe("a subscription's run of failed attempts", () => {
  it("counts 20 attempts failing at once, each on its own connection, in one row", async () => {
    const pools = Array.from({ length: 20 }, () => t.newPool(1));
    await Promise.all(
      pools.map((p, i) =>
        noteFailedAttempt(drizzle(p) as unknown as Db, "notify.mail", `msg_${i}`, `error ${i}`, 13),
      ),
    );
    const { rows } = await t.pool.query("SELECT attempts FROM subscription_failures");
    expect(rows).toEqual([{ attempts: 20 }]);
    // And each job's retry, in a row of its own.
    expect(Object.keys(await retriesDue())).toHaveLength(20);
  });

  it(`starts a new run after ${FAILING_QUIET_MINUTES} quiet minutes or a recovery`, async () => {
    const now = new Date();
    await run("notify.mail", {
      started: minutesAgo(now, 60),
      last: minutesAgo(now, FAILING_QUIET_MINUTES + 1),
      attempts: 9,
    });
    await noteFailedAttempt(db(), "notify.mail", "msg_1", "again", null);
    const quiet = await t.pool.query(
      "SELECT attempts, streak_started_at > $1 AS fresh FROM subscription_failures",
      [minutesAgo(now, 1)],
    );
    expect(quiet.rows).toEqual([{ attempts: 1, fresh: true }]);

    await noteFailedAttempt(db(), "notify.mail", "msg_2", "and again", null);
    expect((await t.pool.query("SELECT attempts FROM subscription_failures")).rows).toEqual([
      { attempts: 2 },
    ]);
    await t.pool.query("UPDATE subscription_failures SET recovered_at = now()");
    await noteFailedAttempt(db(), "notify.mail", "msg_3", "after recovering", null);
    expect((await t.pool.query("SELECT attempts, recovered_at FROM subscription_failures")).rows).toEqual([
      { attempts: 1, recovered_at: null },
    ]);
  });
});

describe("the retry QStash owes a failed job", () => {
  it("is due after QStash's backoff, the later reading, capped at a day; none after the last retry", () => {
    // min(1 day, e^(2.5·n)) s with n = retried + 1: 12.2 s, 2 min 28 s, 30 min, 6 h, a day.
    expect([0, 1, 2, 3, 4].map((retried) => nextRetryDelaySeconds(retried, 5))).toEqual([
      13, 149, 1809, 22027, 86_400,
    ]);
    expect(nextRetryDelaySeconds(5, 5)).toBeNull();
    expect(nextRetryDelaySeconds(0, 0)).toBeNull();
    // Retries left to the plan: one is expected.
    expect(nextRetryDelaySeconds(9, undefined)).toBe(86_400);
  });

  it("keeps a run going through a quiet spell while a job's retry is due, and keeps each job's own", async () => {
    const now = new Date();
    // 20 quiet minutes, but a job's 30-minute retry is still 10 minutes away: the
    // outage is not over, and the retry's failure counts in the same run.
    await run("notify.mail", {
      started: minutesAgo(now, 60),
      last: minutesAgo(now, FAILING_QUIET_MINUTES + 5),
      attempts: 9,
      retryDue: minutesAgo(now, -10),
    });
    await noteFailedAttempt(db(), "notify.mail", "msg_a", "the 6 h retry's attempt", 22_027);
    const going = await t.pool.query(
      "SELECT attempts, streak_started_at < $1 AS same_run FROM subscription_failures",
      [minutesAgo(now, 59)],
    );
    expect(going.rows).toEqual([{ attempts: 10, same_run: true }]);
    expect(await retriesDue()).toEqual({ msg_a: 22_027, msg_earlier: 600 });
    // A job's next failure moves its own retry, not another job's.
    await noteFailedAttempt(db(), "notify.mail", "msg_a", "the day's retry's attempt", 86_400);
    expect(await retriesDue()).toEqual({ msg_a: 86_400, msg_earlier: 600 });
    // Its last attempt failed: QStash owes it nothing more.
    await noteFailedAttempt(db(), "notify.mail", "msg_a", "its last attempt", null);
    expect(await retriesDue()).toEqual({ msg_earlier: 600 });
    expect((await t.pool.query("SELECT attempts FROM subscription_failures")).rows).toEqual([
      { attempts: 12 },
    ]);
  });

  it("a retry long past does not keep a run going", async () => {
    const now = new Date();
    await run("notify.mail", {
      started: minutesAgo(now, 600),
      last: minutesAgo(now, 300),
      attempts: 9,
      retryDue: minutesAgo(now, 200),
    });
    await noteFailedAttempt(db(), "notify.mail", "msg_a", "a last attempt", null);
    expect((await t.pool.query("SELECT attempts FROM subscription_failures")).rows).toEqual([
      { attempts: 1 },
    ]);
  });
});

describe("the sweep's subscription.failing alert", () => {
  it("is raised for a run of 5 minutes that goes on, updated in place, and resolved once it ends", async () => {
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 6), last: minutesAgo(now, 1), attempts: 355 });
    // Too short a run, and one that ended: neither is failing now.
    await run("corpus.index", { started: minutesAgo(now, 2), last: minutesAgo(now, 1), attempts: 3 });
    await run("webhook.fanout", { started: minutesAgo(now, 60), last: minutesAgo(now, 20), attempts: 40 });

    expect(await evaluateFailingSubscriptions(db(), { now })).toEqual({
      failing: 1,
      raised: ["notify.mail"],
      recovered: [],
    });
    const [raised] = await openAlerts();
    expect(raised).toMatchObject({ subscription: "notify.mail" });
    expect(raised.message).toMatch(
      /^subscription notify\.mail is failing: 355 job attempts failed since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, the latest at .* UTC: mail API answered 503: provider down\. QStash retries them; a job that runs out of retries becomes a job failure to retry$/,
    );
    expect(raised.details).toMatchObject({
      attempts: 355,
      lastError: "mail API answered 503: provider down",
    });

    await t.pool.query("UPDATE subscription_failures SET attempts = 400 WHERE subscription = 'notify.mail'");
    expect((await evaluateFailingSubscriptions(db(), { now })).raised).toEqual([]);
    const [updated] = await openAlerts();
    expect(updated.id).toBe(raised.id);
    expect(updated.details.attempts).toBe(400);

    await t.pool.query(
      "UPDATE subscription_failures SET recovered_at = now() WHERE subscription = 'notify.mail'",
    );
    expect(await evaluateFailingSubscriptions(db(), { now })).toEqual({
      failing: 0,
      raised: [],
      recovered: ["notify.mail"],
    });
    expect(await openAlerts()).toEqual([]);
    // Resolved saying why, no longer "is failing".
    const { rows } = await t.pool.query("SELECT message FROM outbox_alerts WHERE id = $1", [raised.id]);
    expect(rows[0].message).toMatch(
      /^subscription notify\.mail recovered \(a job that had failed succeeded at .* UTC\) after 400 failed job attempts since .* UTC; jobs QStash is still retrying are delivered at their next retry$/,
    );
  });

  it("resolves with the figures of the run that ended when the next run starts before a sweep looks", async () => {
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 20), last: minutesAgo(now, 1), attempts: 2_149 });
    await evaluateFailingSubscriptions(db(), { now });
    const [raised] = await openAlerts();
    // A retried job succeeds; jobs in flight then fail just after, before the next sweep.
    await t.pool.query("UPDATE subscription_failures SET recovered_at = now()");
    await noteFailedAttempt(db(), "notify.mail", "msg_late_1", "mail API answered 503: provider down", 13);
    await noteFailedAttempt(db(), "notify.mail", "msg_late_2", "mail API answered 503: provider down", 13);

    expect(await openAlerts()).toEqual([]);
    const { rows } = await t.pool.query("SELECT message FROM outbox_alerts WHERE id = $1", [raised.id]);
    expect(rows[0].message).toMatch(
      /^subscription notify\.mail recovered \(a job that had failed succeeded at .* UTC\) after 2149 failed job attempts since .* UTC; jobs QStash is still retrying are delivered at their next retry$/,
    );
    // The new run is counted from its own first failure, and raises its own alert once it lasts.
    expect((await t.pool.query("SELECT attempts FROM subscription_failures")).rows).toEqual([
      { attempts: 2 },
    ]);
    const later = new Date(now.getTime() + 6 * 60_000);
    expect((await evaluateFailingSubscriptions(db(), { now: later })).raised).toEqual(["notify.mail"]);
    expect((await openAlerts())[0].details.attempts).toBe(2);
  });

  it("says how many of its jobs already ran out of retries: QStash holds those no more", async () => {
    await t.pool.query("TRUNCATE job_failures");
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 6), last: minutesAgo(now, 1), attempts: 12 });
    // Two owed; one retried already, and one of another subscription, are not.
    await insertJobFailure(t.pool);
    await insertJobFailure(t.pool);
    const retried = await insertJobFailure(t.pool);
    await t.pool.query(
      "UPDATE job_failures SET retried_at = now(), retry_message_id = 'msg_r' WHERE id = $1",
      [retried],
    );
    await insertJobFailure(t.pool, { subscription: "corpus.index" });

    await evaluateFailingSubscriptions(db(), { now });
    const [alert] = await openAlerts();
    expect(alert.message).toMatch(
      /: mail API answered 503: provider down\. 2 jobs ran out of retries and wait for a retry among the job failures; QStash owes none of its jobs another retry, so this alert resolves after \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC unless another attempt fails; a job that runs out of retries becomes a job failure to retry$/,
    );
    expect(alert.details.jobFailuresOwed).toBe(2);
    // With another job's retry still due, QStash has the others.
    await t.pool.query(
      "INSERT INTO job_retries_due (message_id, subscription, due_at) VALUES ('msg_other', 'notify.mail', $1)",
      [minutesAgo(now, -30)],
    );
    await evaluateFailingSubscriptions(db(), { now });
    expect((await openAlerts())[0].message).toMatch(
      /2 jobs ran out of retries and wait for a retry among the job failures; QStash retries the others, the last expected by .* UTC; a job that runs out/,
    );

    await t.pool.query("UPDATE subscription_failures SET recovered_at = now()");
    await evaluateFailingSubscriptions(db(), { now });
    const { rows } = await t.pool.query("SELECT message FROM outbox_alerts WHERE id = $1", [alert.id]);
    expect(rows[0].message).toMatch(
      /; jobs QStash is still retrying are delivered at their next retry; 2 jobs that ran out of retries still wait for a retry$/,
    );
    await t.pool.query("TRUNCATE job_failures");
  });

  it("says one job in the singular, raised and resolved", async () => {
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 6), last: minutesAgo(now, 1), attempts: 6 });
    await insertJobFailure(t.pool);
    await evaluateFailingSubscriptions(db(), { now });
    const [alert] = await openAlerts();
    expect(alert.message).toContain("1 job ran out of retries and waits for a retry among the job failures");
    await t.pool.query("UPDATE subscription_failures SET recovered_at = now()");
    await evaluateFailingSubscriptions(db(), { now });
    const { rows } = await t.pool.query("SELECT message FROM outbox_alerts WHERE id = $1", [alert.id]);
    expect(rows[0].message).toMatch(/; 1 job that ran out of retries still waits for a retry$/);
  });

  it("resolves after the quiet spell too, and 4 sweeps at once raise one alert", async () => {
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 30), last: minutesAgo(now, 2), attempts: 50 });
    const sweeps = Array.from({ length: 4 }, () =>
      evaluateFailingSubscriptions(drizzle(t.newPool(1)) as unknown as Db, { now }),
    );
    const checks = await Promise.all(sweeps);
    expect(checks.flatMap((c) => c.raised)).toEqual(["notify.mail"]);
    expect(await openAlerts()).toHaveLength(1);

    const later = new Date(now.getTime() + FAILING_QUIET_MINUTES * 60_000);
    expect((await evaluateFailingSubscriptions(db(), { now: later })).recovered).toEqual(["notify.mail"]);
    expect(await openAlerts()).toEqual([]);
    const { rows } = await t.pool.query(
      "SELECT message FROM outbox_alerts WHERE kind = 'subscription.failing'",
    );
    expect(rows[0].message).toContain(
      // Not "recovered": nothing succeeded, the provider may still be down.
      `stopped failing: no job failed for ${FAILING_QUIET_MINUTES} min, after 50 failed job attempts since`,
    );
  });
});

describe("an outage with no new jobs (QStash's retries ever further apart)", () => {
  it("keeps one alert open until the quiet spell after the last retry due, then says why it resolved", async () => {
    const now = new Date();
    // The last failure was 20 minutes ago; one job's next retry is due in 10.
    await run("notify.mail", {
      started: minutesAgo(now, 60),
      last: minutesAgo(now, FAILING_QUIET_MINUTES + 5),
      attempts: 40,
      retryDue: minutesAgo(now, -10),
    });
    expect(await evaluateFailingSubscriptions(db(), { now })).toEqual({
      failing: 1,
      raised: ["notify.mail"],
      recovered: [],
    });
    const [open] = await openAlerts();
    expect(open.message).toMatch(
      /QStash retries them, the last expected by \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC; a job that runs out/,
    );
    expect(open.details.retryDueAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    // Past the due time, but not yet the quiet spell after it: still open, the same alert.
    const atDue = new Date(now.getTime() + 11 * 60_000);
    expect(await evaluateFailingSubscriptions(db(), { now: atDue })).toMatchObject({
      failing: 1,
      raised: [],
    });
    expect((await openAlerts()).map((a) => a.id)).toEqual([open.id]);

    const quiet = new Date(now.getTime() + (10 + FAILING_QUIET_MINUTES + 1) * 60_000);
    expect((await evaluateFailingSubscriptions(db(), { now: quiet })).recovered).toEqual(["notify.mail"]);
    const { rows } = await t.pool.query("SELECT message FROM outbox_alerts WHERE id = $1", [open.id]);
    expect(rows[0].message).toMatch(
      new RegExp(
        `stopped failing: no job failed for ${FAILING_QUIET_MINUTES} min after the last retry due at .* UTC, after 40 failed job attempts since .* UTC; none has succeeded since, so it may still be down$`,
      ),
    );
  });
});

describe("the sweep's care of the retries due", () => {
  it("drops a retry due before the quiet spell, which decides nothing any more, and keeps later ones", async () => {
    const now = new Date();
    await t.pool.query(
      `INSERT INTO job_retries_due (message_id, subscription, due_at)
       VALUES ('msg_gone', 'notify.mail', $1), ('msg_recent', 'notify.mail', $2), ('msg_coming', 'notify.mail', $3)`,
      [
        minutesAgo(now, FAILING_QUIET_MINUTES + 1),
        minutesAgo(now, FAILING_QUIET_MINUTES - 1),
        minutesAgo(now, -60),
      ],
    );
    await evaluateFailingSubscriptions(db(), { now });
    expect(Object.keys(await retriesDue())).toEqual(["msg_coming", "msg_recent"]);
  });
});

describe("the job route notes the run", () => {
  let mailApi: Server;
  let answer = 503;
  let env: Bindings;
  const app = appOverTestDatabase(t);

  beforeAll(async () => {
    mailApi = createServer((req, res) => {
      req.resume();
      req.on("end", () => res.writeHead(answer, { "content-type": "text/plain" }).end("provider down"));
    });
    await new Promise<void>((resolve) => mailApi.listen(0, "127.0.0.1", resolve));
    const { port } = mailApi.address() as AddressInfo;
    env = bindings({
      DATABASE_URL: t.url,
      MAIL_API_URL: `http://127.0.0.1:${port}/mail`,
      MAIL_TO: "ops@example.com",
    });
  });
  afterAll(() => new Promise<void>((resolve) => mailApi.close(() => resolve())));

  // A job's attempts: QStash keeps its message id across retries.
  const deliver = (
    body: string,
    retried: number,
    headers: Record<string, string> = {},
    messageId = `msg_${crypto.randomUUID()}`,
  ) =>
    call(app, env, "POST", "/jobs/notify.mail", body, {
      headers: {
        ...headers,
        "upstash-signature": signJwt({
          key: env.QSTASH_CURRENT_SIGNING_KEY!,
          url: `${env.PUBLIC_URL}/jobs/notify.mail`,
          body: Buffer.from(body),
        }),
        "upstash-message-id": messageId,
        "upstash-retried": String(retried),
      },
    });

  it("counts each attempt its handler failed, and ends the run when a retried job succeeds", async () => {
    const jobs = [relayJobBody("notify.mail"), relayJobBody("notify.mail")];
    answer = 503;
    for (const [i, body] of jobs.entries()) expect((await deliver(body, 0, {}, `msg_${i}`)).status).toBe(500);
    const failing = await t.pool.query(
      "SELECT attempts, last_error, recovered_at FROM subscription_failures",
    );
    expect(failing.rows).toEqual([
      { attempts: 2, last_error: expect.stringContaining("mail API answered 503"), recovered_at: null },
    ]);

    answer = 200;
    // A first attempt that works says little during an intermittent outage: not noted.
    expect((await deliver(relayJobBody("notify.mail"), 0)).status).toBe(200);
    expect(
      (await t.pool.query("SELECT recovered_at FROM subscription_failures")).rows[0].recovered_at,
    ).toBeNull();
    // A retried one that works says the subscription works again, and QStash owes it nothing.
    expect((await deliver(jobs[0]!, 1, {}, "msg_0")).status).toBe(200);
    expect(
      (await t.pool.query("SELECT recovered_at FROM subscription_failures")).rows[0].recovered_at,
    ).toBeInstanceOf(Date);
    expect(Object.keys(await retriesDue())).toEqual(["msg_1"]);
  });

  it("answers as the handler decided when the note fails, and logs why without the statement's parameters", async () => {
    answer = 503;
    await t.pool.query(`
      CREATE FUNCTION refuse_note() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'subscription_failures is refusing rows'; END $$;
      CREATE TRIGGER refuse_note BEFORE INSERT ON subscription_failures
        FOR EACH ROW EXECUTE FUNCTION refuse_note();`);
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      expect((await deliver(relayJobBody("notify.mail"), 0, {}, "msg_secretish_id")).status).toBe(500);
      const line = errors.mock.calls.map((c) => c.map(String).join(" ")).find((l) => l.includes("noting"));
      expect(line).toMatch(
        /noting notify\.mail's failed attempt: query failed: subscription_failures is refusing rows/,
      );
      // Drizzle's own message is the statement and then its parameters (here the job's
      // message id and the provider's answer), which no log line carries.
      expect(line).not.toMatch(/params:|msg_secretish_id|provider down/);
    } finally {
      errors.mockRestore();
      await t.pool.query("DROP TRIGGER refuse_note ON subscription_failures; DROP FUNCTION refuse_note()");
    }
  });

  it("records when QStash tries each job next: none after its last retry", async () => {
    answer = 503;
    // notify.mail's jobs have 5 retries: the 6th attempt (retried 5) was the last.
    expect((await deliver(relayJobBody("notify.mail"), 5, {}, "msg_last")).status).toBe(500);
    expect(await retriesDue()).toEqual({});
    expect((await deliver(relayJobBody("notify.mail"), 2, {}, "msg_third")).status).toBe(500);
    const due = await retriesDue();
    expect(due["msg_third"]).toBeGreaterThanOrEqual(1809 - 2);
    expect(due["msg_third"]).toBeLessThanOrEqual(1809 + 2);
    expect((await t.pool.query("SELECT attempts FROM subscription_failures")).rows).toEqual([
      { attempts: 2 },
    ]);
  });

  it("resolves once every failed job's last attempt has failed, though earlier ones expected retries a day away", async () => {
    // Two jobs down to their last retries: each failure expects the next (6 h, a
    // day), then the last attempts fail. QStash owes nothing any more: the failures
    // are job failures now, and the alert is quiet 15 minutes after the last one,
    // not a day after a retry that will never come.
    answer = 503;
    const [a, b] = [relayJobBody("notify.mail"), relayJobBody("notify.mail")];
    expect((await deliver(a, 3, {}, "msg_a")).status).toBe(500);
    expect((await deliver(b, 4, {}, "msg_b")).status).toBe(500);
    expect((await deliver(a, 4, {}, "msg_a")).status).toBe(500);
    expect((await deliver(a, 5, {}, "msg_a")).status).toBe(500);
    expect((await deliver(b, 5, {}, "msg_b")).status).toBe(500);
    await t.pool.query("UPDATE subscription_failures SET streak_started_at = now() - interval '1 hour'");
    const now = new Date();
    expect(await evaluateFailingSubscriptions(db(), { now })).toMatchObject({ raised: ["notify.mail"] });
    const [open] = await openAlerts();
    expect(open.message).not.toContain("the last expected by");
    expect(open.details).toMatchObject({ attempts: 5, retryDueAt: null });

    const quiet = new Date(now.getTime() + (FAILING_QUIET_MINUTES + 1) * 60_000);
    expect(await evaluateFailingSubscriptions(db(), { now: quiet })).toMatchObject({
      failing: 0,
      recovered: ["notify.mail"],
    });
  });

  it("counts a rejected attempt (the provider's 400) as the job's last: QStash owes it nothing more", async () => {
    // A walkthrough: the last attempt answered 489 for a mail 400, the job ended, and
    // its previous attempt's day-away retry kept the alert open a day (and into the
    // next outage), counted neither in the attempts nor as the latest error.
    answer = 503;
    const body = relayJobBody("notify.mail");
    expect((await deliver(body, 4, {}, "msg_rejected")).status).toBe(500);
    expect(Object.keys(await retriesDue())).toEqual(["msg_rejected"]);
    answer = 400;
    expect((await deliver(body, 5, {}, "msg_rejected")).status).toBe(489);
    expect(await retriesDue()).toEqual({});
    const { rows } = await t.pool.query("SELECT attempts, last_error FROM subscription_failures");
    expect(rows).toEqual([{ attempts: 2, last_error: expect.stringContaining("400") }]);
  });

  it("a job recorded as a job failure (the failure callback, a dead letter) is owed no retry", async () => {
    await t.pool.query(
      `INSERT INTO job_retries_due (message_id, subscription, due_at)
       VALUES ('msg_ended', 'notify.mail', now() + interval '1 day'), ('msg_going', 'notify.mail', now() + interval '1 hour')`,
    );
    await jobRanOutOfRetries(t, "notify.mail", crypto.randomUUID(), "msg_ended");
    expect(Object.keys(await retriesDue())).toEqual(["msg_going"]);
  });

  it("ends the run when an operator's retry of a job failure works (a new message, retried 0)", async () => {
    answer = 503;
    expect((await deliver(relayJobBody("notify.mail"), 0)).status).toBe(500);
    answer = 200;
    // QStash forwards the retry's Edge-Outbox-Retry-Of; the message itself is new, so retried is 0.
    expect((await deliver(relayJobBody("notify.mail"), 0, { "Edge-Outbox-Retry-Of": "1" })).status).toBe(200);
    const { rows } = await t.pool.query("SELECT recovered_at FROM subscription_failures");
    expect(rows[0].recovered_at).toBeInstanceOf(Date);
  });
});

describe("the cron sweep", () => {
  it("raises it and says so in its line", async () => {
    const now = new Date();
    await run("notify.mail", { started: minutesAgo(now, 10), last: minutesAgo(now, 1), attempts: 12 });
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      // No QStash here: the sweep's QStash work says it stopped, the rest runs.
      await createScheduled(openTestPool(t.newPool(2)), () => now)(
        {} as ScheduledController,
        bindings({ DATABASE_URL: t.url }),
        executionContext().ctx,
      );
      const line = String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
      expect(line).toContain("; subscriptions failing: 1, newly: notify.mail; ");
    } finally {
      log.mockRestore();
    }
    expect(await openAlerts()).toMatchObject([{ subscription: "notify.mail", details: { attempts: 12 } }]);
  });
});
