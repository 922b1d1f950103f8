import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { freePort } from "../../src/node/postgres.ts";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { insertJobFailure, jobFailureRow, relayJobBody } from "../support/job-failures.ts";
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

  it("QStash refusing is 503 and marks none retried", async () => {
    const id = await insertJobFailure(t.pool);
    qstash.failNextPublishes(1, 500);
    const res = await retryAll({ upTo: id });
    expect(res.status).toBe(503);
    expect(res.body.error.message).toMatch(/none is marked retried: try again/);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("refuses a body without a whole-number upTo", async () => {
    for (const body of [{}, { upTo: "5" }, { upTo: 0 }, { upTo: 1.5 }, { upTo: 5, all: true }]) {
      const res = await retryAll(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect(jobsInQStash()).toHaveLength(0);
  });
});
