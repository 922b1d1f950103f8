import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { signJwt } from "../../infra/qstash-dev/signing.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { freePort } from "../../src/node/postgres.ts";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { SUBSCRIPTION_NAMES } from "../../src/domain/subscriptions.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import {
  insertJobFailure,
  jobFailureRow,
  jobRanOutOfRetries,
  relayJobBody,
} from "../support/job-failures.ts";
import { bindings, call, openTestPool } from "../support/worker.ts";

// POST /admin/job-failures/:id/retry through the app as the Worker runs it, to the
// QStash dev server with delivery paused: what the route published stays there.
// test/worker/workerd-job-failure-retry.test.ts follows a retry through delivery.
const t = useTestDatabase();
const app = createApp({ openDatabase: (config) => openTestPool(t.pool)(config) });
let qstash: QStashDev;
let env: Bindings;
const ADMIN = () => ({ headers: { Authorization: `Bearer ${env.ADMIN_TOKEN}` } });
const retry = (id: number | string, e: Bindings = env) =>
  call(app, e, "POST", `/admin/job-failures/${id}/retry`, undefined, ADMIN());

beforeAll(async () => {
  qstash = await startQStashDev({ log: () => undefined });
  env = bindings({ DATABASE_URL: t.url, QSTASH_URL: qstash.url, QSTASH_TOKEN: qstash.token });
});
afterAll(() => qstash?.close());
beforeEach(async () => {
  await t.pool.query("TRUNCATE job_failures");
  qstash.reset();
  qstash.pauseDelivery();
});

const jobsInQStash = () => qstash.messages().filter((m) => m.kind !== "failure-callback");

describe("POST /admin/job-failures/:id/retry", () => {
  it("publishes the job again and answers its new message id; the listing shows the retry", async () => {
    const body = relayJobBody("notify.mail");
    const id = await insertJobFailure(t.pool, { body });

    const res = await retry(id);

    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id,
      retriedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      retryMessageId: expect.stringMatching(/^msg_/),
    });
    expect(jobsInQStash()).toEqual([
      expect.objectContaining({
        messageId: res.body.retryMessageId,
        url: `${env.PUBLIC_URL}/jobs/notify.mail`,
        body,
      }),
    ]);
    const listed = await call(app, env, "GET", "/admin/job-failures", undefined, ADMIN());
    expect(listed.body.jobFailures).toEqual([
      expect.objectContaining({
        id,
        retriedAt: res.body.retriedAt,
        retryMessageId: res.body.retryMessageId,
      }),
    ]);
  });

  it("a second retry is 409 and publishes nothing", async () => {
    const id = await insertJobFailure(t.pool);
    const first = await retry(id);
    expect(first.status).toBe(200);

    const second = await retry(id);

    expect(second.status).toBe(409);
    expect(second.body.error).toMatchObject({
      code: "CONFLICT",
      message: `job failure ${id} was already retried at ${first.body.retriedAt} as ${first.body.retryMessageId}`,
      requestId: expect.any(String),
    });
    expect(jobsInQStash()).toHaveLength(1);
  });

  it("two concurrent retries publish one job", async () => {
    const id = await insertJobFailure(t.pool);
    qstash.setPublishLatency(200);
    try {
      const answers = await Promise.all([retry(id), retry(id)]);
      expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    } finally {
      qstash.setPublishLatency(0);
    }
    expect(jobsInQStash()).toHaveLength(1);
  });

  it("QStash refusing is 503 and leaves the failure un-retried; asking again works", async () => {
    const id = await insertJobFailure(t.pool);
    qstash.failNextPublishes(1, 500);

    const refused = await retry(id);

    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.body.error).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      message: expect.stringMatching(
        new RegExp(
          `^QStash did not take the retry of job failure ${id} \\(QStash 500: .*\\); the failure is left un-retried: try again$`,
        ),
      ),
    });
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect(jobsInQStash()).toHaveLength(0);

    const again = await retry(id);
    expect(again.status).toBe(200);
    expect(jobsInQStash()).toHaveLength(1);
  });

  it("says to check the token, not only to try again, when QStash refuses it", async () => {
    const id = await insertJobFailure(t.pool);
    const wrongToken = await retry(id, { ...env, QSTASH_TOKEN: "not-the-token" });
    expect(wrongToken.status).toBe(503);
    expect(wrongToken.body.error.message).toMatch(
      /\(QStash 401: .*\); the failure is left un-retried: check QSTASH_TOKEN, then try again$/,
    );
    const all = await call(
      app,
      { ...env, QSTASH_TOKEN: "not-the-token" },
      "POST",
      "/admin/job-failures/retry",
      {
        upTo: id,
      },
      ADMIN(),
    );
    expect(all.body.error.message).toMatch(/none is marked retried: check QSTASH_TOKEN, then try again$/);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("QStash out of reach is 503 and leaves the failure un-retried", async () => {
    const id = await insertJobFailure(t.pool);
    const down = { ...env, QSTASH_URL: `http://127.0.0.1:${await freePort()}` };

    const res = await retry(id, down);

    expect(res.status).toBe(503);
    expect(res.body.error.message).toMatch(/QStash unreachable/);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("an unknown id is 404; an id that is not a number is no route", async () => {
    const unknown = await retry(424_242);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({ code: "NOT_FOUND", message: "job failure 424242 not found" });
    for (const id of ["abc", "0", "-1", "1.5", "1234567890123456"]) {
      const res = await retry(id);
      expect({ id, status: res.status, code: res.body.error.code }).toEqual({
        id,
        status: 404,
        code: "NOT_FOUND",
      });
    }
    expect(jobsInQStash()).toHaveLength(0);
  });

  it("a failure that is not a job of ours is 409, saying why, and publishes nothing", async () => {
    const id = await insertJobFailure(t.pool, {
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });

    const res = await retry(id);

    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({
      code: "CONFLICT",
      message: `job failure ${id} cannot be retried: "https://elsewhere.example/hook" is not one of this app's subscriptions`,
    });
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect(jobsInQStash()).toHaveLength(0);
  });

  it("needs the operator token and takes no body", async () => {
    const id = await insertJobFailure(t.pool);
    const anonymous = await call(app, env, "POST", `/admin/job-failures/${id}/retry`);
    expect(anonymous.status).toBe(401);
    const withBody = await call(
      app,
      env,
      "POST",
      `/admin/job-failures/${id}/retry`,
      { force: true },
      ADMIN(),
    );
    expect(withBody.status).toBe(400);
    expect(withBody.body.error.issues).toEqual([{ path: "force", message: "is not a known field" }]);
    expect(jobsInQStash()).toHaveLength(0);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });
});

describe("GET /admin/events/:id", () => {
  it("answers the open job.failed alert that counts its failed job under a later event", async () => {
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const [earlier, later] = await seedEvents(t.pool, 2, { fanned: true });
    for (const id of [earlier, later]) await jobRanOutOfRetries(t, "notify.mail", id!);
    const shown = await call(app, env, "GET", `/admin/events/${earlier}`, undefined, ADMIN());
    expect(shown.status).toBe(200);
    expect(shown.body.event.alerts).toEqual([]);
    expect(shown.body.event.countingAlerts).toEqual([
      expect.objectContaining({ kind: "job.failed", eventId: later, resolvedAt: null }),
    ]);
    const own = await call(app, env, "GET", `/admin/events/${later}`, undefined, ADMIN());
    expect(own.body.event.countingAlerts).toEqual([]);
    expect(own.body.event.alerts).toEqual([expect.objectContaining({ kind: "job.failed" })]);
  });

  it("names its jobs QStash may still hold, as the sweep last read the wait lists", async () => {
    const [id] = await seedEvents(t.pool, 1, { fanned: true });
    await t.pool.query(
      `UPDATE events SET fanout = '{"notify.mail":{"messageId":"msg_mail"}}', fanned_out_at = now() - interval '1 minute'
        WHERE id = $1`,
      [id],
    );
    const { rows } = await t.pool.query(
      `INSERT INTO subscription_wait_lists (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('notify.mail', 7, 10, 10, false, now() - interval '5 minutes', date_trunc('second', now()))
       RETURNING checked_at`,
    );
    try {
      const shown = await call(app, env, "GET", `/admin/events/${id}`, undefined, ADMIN());
      expect(shown.body.event.jobsWaiting).toEqual([
        {
          subscription: "notify.mail",
          waiting: 7,
          paused: false,
          checkedAt: (rows[0] as { checked_at: Date }).checked_at.toISOString(),
        },
      ]);
    } finally {
      await t.pool.query("DELETE FROM subscription_wait_lists");
    }
  });
});

describe("POST /admin/job-failures/retry", () => {
  const retryAll = (body: unknown) => call(app, env, "POST", "/admin/job-failures/retry", body, ADMIN());

  it("retries every failure not yet retried up to upTo, and says whether more are left", async () => {
    const ids = [await insertJobFailure(t.pool), await insertJobFailure(t.pool)];
    const later = await insertJobFailure(t.pool);

    const res = await retryAll({ upTo: ids[1] });

    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      retried: ids.map((id) => ({ id, retryMessageId: expect.stringMatching(/^msg_/) })),
      more: false,
    });
    expect(
      jobsInQStash()
        .map((m) => m.messageId)
        .sort(),
    ).toEqual(res.body.retried.map((r: { retryMessageId: string }) => r.retryMessageId).sort());
    expect((await jobFailureRow(t.pool, later)).retried_at).toBeNull();
    expect((await retryAll({ upTo: ids[1] })).body).toEqual({ retried: [], more: false });
  });

  it("of one subscription retries only its failures, as GET lists only them", async () => {
    const mail = await insertJobFailure(t.pool, { subscription: "notify.mail" });
    const index = await insertJobFailure(t.pool, { subscription: "corpus.index" });
    const listed = await call(
      app,
      env,
      "GET",
      "/admin/job-failures?subscription=notify.mail",
      undefined,
      ADMIN(),
    );
    expect(listed.body.jobFailures.map((f: { id: number }) => f.id)).toEqual([mail]);

    const res = await retryAll({ upTo: index, subscription: "notify.mail" });

    expect(res.body.retried.map((r: { id: number }) => r.id)).toEqual([mail]);
    expect((await jobFailureRow(t.pool, index)).retried_at).toBeNull();
    // A name that is no subscription is a mistake to say, not an empty list.
    const typo = await call(
      app,
      env,
      "GET",
      "/admin/job-failures?subscription=notify.mial",
      undefined,
      ADMIN(),
    );
    expect(typo.status).toBe(400);
    expect(typo.body.error.message).toContain(
      // Every subscription named, whichever a team adds.
      `subscription: must name a subscription: ${SUBSCRIPTION_NAMES.join(", ")}`,
    );
    expect((await retryAll({ upTo: index, subscription: "notify.mial" })).status).toBe(400);
    expect((await jobFailureRow(t.pool, index)).retried_at).toBeNull();
  });

  it("QStash refusing is 503 and marks none retried", async () => {
    const id = await insertJobFailure(t.pool);
    qstash.failNextPublishes(1, 500);
    const res = await retryAll({ upTo: id });
    expect(res.status).toBe(503);
    expect(res.body.error.message).toMatch(/none is marked retried: try again/);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("refuses a body without a whole-number upTo", async () => {
    const said: [unknown, string][] = [
      // Missing is said as missing, not as the wrong form the schema's own message names.
      [{}, "upTo: is required"],
      [{ upTo: null }, "upTo: must be a job failure id (a positive whole number)"],
      [{ upTo: "5" }, "upTo: must be a job failure id (a positive whole number)"],
      [{ upTo: 0 }, "upTo: must be at least 1"],
      [{ upTo: 1.5 }, "upTo: must be a job failure id (a positive whole number)"],
      [{ upTo: 5, all: true }, "all: is not a known field"],
    ];
    for (const [body, message] of said) {
      const res = await retryAll(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.message, JSON.stringify(body)).toBe(`invalid body: ${message}`);
    }
    expect(jobsInQStash()).toHaveLength(0);
  });
});

describe("a retried job's route says that the retry was delivered", () => {
  const deliver = (
    body: string,
    retryOf: string | undefined,
    path = "/jobs/notify.mail",
    messageId = `msg_${crypto.randomUUID()}`,
  ) => {
    const signature = signJwt({
      key: env.QSTASH_CURRENT_SIGNING_KEY!,
      url: `${env.PUBLIC_URL}${path}`,
      body: Buffer.from(body),
    });
    return call(app, env, "POST", path, body, {
      headers: {
        "upstash-signature": signature,
        "upstash-message-id": messageId,
        ...(retryOf === undefined ? {} : { "edge-outbox-retry-of": retryOf }),
      },
    });
  };
  const deliveredAt = async (id: number): Promise<Date | null> =>
    (await t.pool.query("SELECT retry_delivered_at FROM job_failures WHERE id = $1", [id])).rows[0]
      .retry_delivered_at;

  it("the retry's job carries the failure's id; its route's 200 marks the failure, once", async () => {
    const id = await insertJobFailure(t.pool);
    const res = await retry(id);
    const [job] = jobsInQStash();
    // QStash hands the route `Upstash-Forward-Edge-Outbox-Retry-Of` without its prefix.
    expect(job!.header["Edge-Outbox-Retry-Of"]).toEqual([String(id)]);
    const listed = async () =>
      (await call(app, env, "GET", "/admin/job-failures", undefined, ADMIN())).body.jobFailures[0];
    expect(await listed()).toMatchObject({
      id,
      retryMessageId: res.body.retryMessageId,
      retryDeliveredAt: null,
    });

    const answered = await deliver(
      job!.body,
      job!.header["Edge-Outbox-Retry-Of"]![0],
      "/jobs/notify.mail",
      res.body.retryMessageId,
    );

    expect(answered.status).toBe(200);
    const at = await deliveredAt(id);
    expect(at).toBeInstanceOf(Date);
    expect((await listed()).retryDeliveredAt).toBe(at!.toISOString());
    // QStash delivers at least once: the second delivery keeps the first's time.
    expect((await deliver(job!.body, String(id), "/jobs/notify.mail", res.body.retryMessageId)).status).toBe(
      200,
    );
    expect(await deliveredAt(id)).toEqual(at);
  });

  it("marks nothing for a job that failed, a failure never retried, or a header naming no failure", async () => {
    const retried = await insertJobFailure(t.pool);
    await retry(retried);
    const [job] = jobsInQStash();
    // The subscriber refuses the job (no supplier in its event): 489, not delivered.
    const refused = relayJobBody("notify.mail", { payload: {} });
    expect((await deliver(refused, String(retried))).status).toBe(489);
    expect(await deliveredAt(retried)).toBeNull();

    const never = await insertJobFailure(t.pool);
    expect((await deliver(job!.body, String(never))).status).toBe(200);
    expect(await deliveredAt(never)).toBeNull();
    for (const header of ["", "abc", "-1", "1e3", "0", "99999999999999999999999", `${retried} OR 1=1`]) {
      expect((await deliver(job!.body, header)).status, header).toBe(200);
    }
    expect(await deliveredAt(retried)).toBeNull();
  });

  it("marks nothing for a job that is not the failure's retry, whatever id it forwards", async () => {
    const retried = await insertJobFailure(t.pool);
    const res = await retry(retried);
    const [job] = jobsInQStash();
    // The header is forwarded, not signed: another message naming this failure (a signed
    // job replayed with the header changed) said its retry was delivered.
    expect((await deliver(job!.body, String(retried))).status).toBe(200);
    expect(await deliveredAt(retried)).toBeNull();
    expect(
      (await deliver(job!.body, String(retried), "/jobs/notify.mail", res.body.retryMessageId)).status,
    ).toBe(200);
    expect(await deliveredAt(retried)).toBeInstanceOf(Date);
  });

  it("takes a retry whose message id is not recorded yet on its header and body", async () => {
    const body = relayJobBody("notify.mail");
    const id = await insertJobFailure(t.pool, { body });
    // Claimed and published; the answer's message id not written back yet.
    await t.pool.query("UPDATE job_failures SET retried_at = now() WHERE id = $1", [id]);
    expect((await deliver(body, String(id))).status).toBe(200);
    expect(await deliveredAt(id)).toBeInstanceOf(Date);
  });

  it("marks nothing for another job's body, even with the failure's id and its retry's message id", async () => {
    const first = await insertJobFailure(t.pool);
    const res = await retry(first);
    const second = await insertJobFailure(t.pool);
    await retry(second);
    const secondJob = jobsInQStash().find((j) => j.header["Edge-Outbox-Retry-Of"]?.[0] === String(second));
    // A walkthrough's replay: the second's signed job, headers naming the first and its
    // retry's message id (shown in the CLI and the dashboard), neither of them signed.
    expect(
      (await deliver(secondJob!.body, String(first), "/jobs/notify.mail", res.body.retryMessageId)).status,
    ).toBe(200);
    expect(await deliveredAt(first)).toBeNull();
  });

  it("a database that refuses the mark still answers 200: the job itself is done", async () => {
    const id = await insertJobFailure(t.pool);
    const res = await retry(id);
    const [job] = jobsInQStash();
    await t.pool.query(`
      CREATE FUNCTION refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'job_failures is refusing updates'; END $$;
      CREATE TRIGGER refuse_update BEFORE UPDATE ON job_failures FOR EACH ROW EXECUTE FUNCTION refuse_update();`);
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      expect(
        (await deliver(job!.body, String(id), "/jobs/notify.mail", res.body.retryMessageId)).status,
      ).toBe(200);
      expect(String(logged.mock.calls[0]?.[0])).toContain(`job failure ${id}'s retry was delivered`);
    } finally {
      logged.mockRestore();
      await t.pool.query("DROP TRIGGER refuse_update ON job_failures; DROP FUNCTION refuse_update()");
    }
    expect(await deliveredAt(id)).toBeNull();
  });
});
