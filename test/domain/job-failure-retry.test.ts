import { drizzle } from "drizzle-orm/node-postgres";
import { beforeEach, describe, expect, it } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import { recordFailedJob } from "../../src/domain/job-failures/failed-job.ts";
import { jobFailuresPage, listJobFailures, recordJobFailure } from "../../src/domain/job-failures/record.ts";
import {
  ABANDONED_CLAIM_MS,
  countOpenFailures,
  retryAllJobFailures,
  retryJobFailure,
} from "../../src/domain/job-failures/retry.ts";
import { PublishError, type Job, type Publisher } from "../../src/outbox/index.ts";
import { publisherFor } from "../../src/worker/relay.ts";
import { freePort } from "../../src/node/postgres.ts";
import { useTestDatabase } from "../support/db.ts";
import { untilALockWait, waitFor } from "../support/helpers.ts";
import { insertJobFailure, jobFailureRow, relayJobBody, usePausedQStash } from "../support/job-failures.ts";

// The retry use case against real Postgres and the QStash dev server, whose
// delivery is paused: what it publishes stays there to be looked at.
const t = useTestDatabase();
const PUBLIC_URL = "http://127.0.0.1:8787";
const paused = usePausedQStash(t);
let published: Job[];
let publisher: Publisher;
const db = () => t.db as unknown as Db;

beforeEach(() => {
  const { qstash } = paused;
  published = [];
  const real = publisherFor({
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
    PUBLIC_URL,
    QSTASH_BATCH_MESSAGES: 500,
  });
  // The relay's own QStash publisher, with the jobs it was handed kept for the test.
  publisher = {
    publish(jobs, signal) {
      published.push(...jobs);
      return real.publish(jobs, signal);
    },
  };
});

const jobsInQStash = () => paused.qstash.messages().filter((m) => m.kind !== "failure-callback");

describe("retryJobFailure", () => {
  it("publishes the stored body once, as a new job for its subscription, and records it", async () => {
    const body = relayJobBody("notify.mail");
    const id = await insertJobFailure(t.pool, { body, messageId: "msg_original" });
    const now = new Date("2026-12-05T08:00:00.123Z");

    const result = await retryJobFailure(db(), publisher, id, now);

    expect(result).toEqual({
      retried: true,
      id,
      retriedAt: now,
      retryMessageId: expect.stringMatching(/^msg_/),
    });
    const retryMessageId = result.retried ? result.retryMessageId : "";
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: now, retry_message_id: retryMessageId });
    // What QStash holds: one message, to the subscription's route, the bytes that failed,
    // with the subscription's retries.
    expect(jobsInQStash()).toEqual([
      expect.objectContaining({
        messageId: retryMessageId,
        url: `${PUBLIC_URL}/jobs/notify.mail`,
        body,
        maxRetries: 5,
      }),
    ]);
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ subscription: "notify.mail", json: body, retries: 5 });
    expect(published[0]!.deduplicationId).toMatch(/^msg_original:retry-[0-9a-f-]{36}$/);
  });

  it("refuses a second retry and publishes nothing", async () => {
    const id = await insertJobFailure(t.pool);
    const first = await retryJobFailure(db(), publisher, id);
    expect(first.retried).toBe(true);
    const before = await jobFailureRow(t.pool, id);

    const second = await retryJobFailure(db(), publisher, id);

    expect(second).toMatchObject({
      retried: false,
      refused: "already_retried",
      retryMessageId: before.retry_message_id,
      message: expect.stringContaining(`as ${before.retry_message_id}`),
    });
    expect(jobsInQStash()).toHaveLength(1);
    expect(await jobFailureRow(t.pool, id)).toEqual(before);
  });

  it("of concurrent retries, exactly one publishes", async () => {
    const id = await insertJobFailure(t.pool);
    // Every retry reads the row un-retried, then all claim it at once: a lock taken
    // here holds their claims until all of them are waiting, then lets them go.
    const holder = await t.newPool(1).connect();
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM job_failures WHERE id = $1 FOR UPDATE", [id]);
    const retries = Array.from({ length: 5 }, () => retryJobFailure(db(), publisher, id));
    await waitFor(async () => {
      const { rows } = await t.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE job_failures%'`,
      );
      return rows[0].n === 5;
    });
    await holder.query("COMMIT");
    holder.release();

    const results = await Promise.all(retries);

    expect(results.filter((r) => r.retried)).toHaveLength(1);
    expect(results.filter((r) => !r.retried && r.refused === "already_retried")).toHaveLength(4);
    expect(published).toHaveLength(1);
    expect(jobsInQStash()).toHaveLength(1);
    expect((await jobFailureRow(t.pool, id)).retry_message_id).toBe(jobsInQStash()[0]!.messageId);
  });

  it("a retry that arrives while another's publish is in flight is refused", async () => {
    const id = await insertJobFailure(t.pool);
    paused.qstash.setPublishLatency(300);
    try {
      const first = retryJobFailure(db(), publisher, id);
      await waitFor(() => published.length === 1);
      const second = await retryJobFailure(db(), publisher, id);
      expect(second).toMatchObject({ refused: "already_retried", retryMessageId: null });
      expect(second.retried ? "" : second.message).toMatch(/its publish has not been recorded/);
      expect((await first).retried).toBe(true);
    } finally {
      paused.qstash.setPublishLatency(0);
    }
    expect(jobsInQStash()).toHaveLength(1);
  });

  it("a claim abandoned by a request cut off before its publish is taken over a minute later", async () => {
    const id = await insertJobFailure(t.pool);
    // What a request killed between its claim and its publish leaves behind.
    await t.pool.query("UPDATE job_failures SET retried_at = now() WHERE id = $1", [id]);
    const soon = await retryJobFailure(db(), publisher, id, new Date(Date.now() + 5_000));
    expect(soon).toMatchObject({ refused: "already_retried", retryMessageId: null });
    expect(jobsInQStash()).toHaveLength(0);
    const later = await retryJobFailure(
      db(),
      publisher,
      id,
      new Date(Date.now() + ABANDONED_CLAIM_MS + 5_000),
    );
    expect(later).toMatchObject({ retried: true, retryMessageId: expect.any(String) });
    expect(jobsInQStash()).toHaveLength(1);
    // Once taken over and recorded, it is retried: no further takeover.
    const after = await retryJobFailure(db(), publisher, id, new Date(Date.now() + 10 * ABANDONED_CLAIM_MS));
    expect(after).toMatchObject({ refused: "already_retried" });
    expect(jobsInQStash()).toHaveLength(1);
  });

  it("a publish QStash refuses leaves the failure un-retried, and a later retry works", async () => {
    const id = await insertJobFailure(t.pool);
    paused.qstash.failNextPublishes(1, 503);

    const error = await retryJobFailure(db(), publisher, id).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(PublishError);
    expect((error as PublishError).status).toBe(503);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect(jobsInQStash()).toHaveLength(0);

    const again = await retryJobFailure(db(), publisher, id);
    expect(again.retried).toBe(true);
    expect(jobsInQStash()).toHaveLength(1);
    // Each attempt had a deduplication id of its own.
    expect(new Set(published.map((j) => j.deduplicationId)).size).toBe(2);
  });

  it("an unreachable QStash leaves the failure un-retried", async () => {
    const id = await insertJobFailure(t.pool);
    const unreachable = publisherFor({
      // Nothing listens there: the connection is refused.
      QSTASH_URL: `http://127.0.0.1:${await freePort()}`,
      QSTASH_TOKEN: "token",
      PUBLIC_URL,
      QSTASH_BATCH_MESSAGES: 500,
    });

    await expect(retryJobFailure(db(), unreachable, id)).rejects.toThrow(/QStash unreachable/);

    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect((await retryJobFailure(db(), publisher, id)).retried).toBe(true);
  });

  it("a publisher that throws something else is an outage too, and the claim is undone", async () => {
    const id = await insertJobFailure(t.pool);
    const broken: Publisher = { publish: () => Promise.reject(new TypeError("fetch failed")) };

    const error = await retryJobFailure(db(), broken, id).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(PublishError);
    expect(error).toMatchObject({ kind: "outage", message: "publish failed: fetch failed" });
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("an unknown id is not found", async () => {
    expect(await retryJobFailure(db(), publisher, 987_654)).toEqual({
      retried: false,
      refused: "not_found",
      message: "job failure 987654 not found",
    });
    expect(published).toHaveLength(0);
  });

  it("refuses what is not a job of ours, and publishes nothing", async () => {
    const cases: [string, { subscription?: string; body?: string }, RegExp][] = [
      [
        "a subscription that is a whole URL (the job was not sent to one of our routes)",
        { subscription: "https://elsewhere.example/hook", body: relayJobBody("notify.mail") },
        /"https:\/\/elsewhere\.example\/hook" is not one of this app's subscriptions/,
      ],
      [
        "a subscription that is not in the registry",
        { subscription: "old.subscription", body: relayJobBody("old.subscription") },
        /"old\.subscription" is not one of this app's subscriptions/,
      ],
      ["a body that is not JSON", { body: "not json" }, /job body is not JSON/],
      ["a body that is not a job", { body: '{"hello":"world"}' }, /not an edge-outbox job/],
      [
        "a body for another subscription",
        { subscription: "notify.mail", body: relayJobBody("corpus.index") },
        /a job for "corpus\.index", not for "notify\.mail"/,
      ],
    ];
    for (const [what, fields, message] of cases) {
      const id = await insertJobFailure(t.pool, fields);
      const result = await retryJobFailure(db(), publisher, id);
      expect(result, what).toEqual({ retried: false, refused: "not_retryable", message: expect.any(String) });
      expect(result.retried ? "" : result.message, what).toMatch(message);
      expect(await jobFailureRow(t.pool, id), what).toEqual({ retried_at: null, retry_message_id: null });
    }
    expect(published).toHaveLength(0);
    expect(jobsInQStash()).toHaveLength(0);
  });
});

describe("retryAllJobFailures", () => {
  it("retries every open failure of ours up to the one the operator saw, oldest first, once", async () => {
    const bodies = ["notify.mail", "corpus.index", "notify.mail"].map((s) => relayJobBody(s));
    const [a, b, c] = [
      await insertJobFailure(t.pool, { subscription: "notify.mail", body: bodies[0] }),
      await insertJobFailure(t.pool, { subscription: "corpus.index", body: bodies[1] }),
      await insertJobFailure(t.pool, { subscription: "notify.mail", body: bodies[2] }),
    ];
    const done = await insertJobFailure(t.pool);
    expect((await retryJobFailure(db(), publisher, done)).retried).toBe(true);
    const foreign = await insertJobFailure(t.pool, {
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });
    const seen = foreign;
    const later = await insertJobFailure(t.pool);
    paused.qstash.reset();
    published = [];
    expect(await countOpenFailures(db(), { upTo: seen })).toBe(3);

    const result = await retryAllJobFailures(db(), publisher, { upTo: seen });

    expect(result.more).toBe(false);
    expect(result.retried.map((r) => r.id)).toEqual([a, b, c]);
    // One publish of three jobs, each the bytes that failed, to its own route.
    expect(published.map((j) => j.json)).toEqual(bodies);
    expect(
      jobsInQStash()
        .map((m) => [m.messageId, m.url, m.body])
        .sort(),
    ).toEqual(
      result.retried
        .map((r, i) => [
          r.retryMessageId,
          `${PUBLIC_URL}/jobs/${JSON.parse(bodies[i]!).subscription}`,
          bodies[i],
        ])
        .sort(),
    );
    for (const r of result.retried) {
      expect((await jobFailureRow(t.pool, r.id)).retry_message_id).toBe(r.retryMessageId);
    }
    // Not the one retried before, not someone else's, not the one recorded after the operator looked.
    for (const id of [foreign, later]) expect((await jobFailureRow(t.pool, id)).retried_at).toBeNull();
    expect(await countOpenFailures(db(), { upTo: seen })).toBe(0);
    // And not twice.
    expect(await retryAllJobFailures(db(), publisher, { upTo: seen })).toEqual({ retried: [], more: false });
    expect(jobsInQStash()).toHaveLength(3);
  });

  it("of one subscription, leaves the others' failures alone, and lists and counts that subscription's", async () => {
    // The mail provider is back while the index still fails: only mail jobs go again.
    const [mail1, index1, mail2] = [
      await insertJobFailure(t.pool, { subscription: "notify.mail" }),
      await insertJobFailure(t.pool, { subscription: "corpus.index" }),
      await insertJobFailure(t.pool, { subscription: "notify.mail" }),
    ];
    expect(await countOpenFailures(db(), { upTo: mail2, subscription: "notify.mail" })).toBe(2);
    expect(await countOpenFailures(db(), { upTo: mail2, subscription: "corpus.index" })).toBe(1);
    expect((await listJobFailures(db(), { subscription: "notify.mail" })).map((f) => f.id)).toEqual([
      mail2,
      mail1,
    ]);

    const result = await retryAllJobFailures(db(), publisher, { upTo: mail2, subscription: "notify.mail" });

    expect(result.retried.map((r) => r.id)).toEqual([mail1, mail2]);
    expect((await jobFailureRow(t.pool, index1!)).retried_at).toBeNull();
    expect(await countOpenFailures(db(), { upTo: mail2 })).toBe(1);
  });

  it("lists a page of big bodies short, with its cursor, and pages on to every failure once", async () => {
    // A 3,000-byte body against a 4,000-byte budget: two a page (the second passes it).
    const big = (n: number) => JSON.stringify({ pad: String(n).repeat(3_000) }).slice(0, 3_000);
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await insertJobFailure(t.pool, { body: big(i) }));
    const newestFirst = [...ids].reverse();
    const pages: number[][] = [];
    let before: number | undefined;
    for (;;) {
      const page = await jobFailuresPage(db(), {
        limit: 10,
        pageBytes: 4_000,
        ...(before ? { before } : {}),
      });
      pages.push(page.jobFailures.map((f) => f.id));
      expect(page.jobFailures.every((f) => f.body.length === 3_000)).toBe(true);
      if (page.nextBefore === null) break;
      expect(page.nextBefore).toBe(page.jobFailures.at(-1)!.id);
      before = page.nextBefore;
    }
    expect(pages).toEqual([newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)]);
    // Without the cut, the page is as before.
    expect((await jobFailuresPage(db(), { limit: 10 })).jobFailures.map((f) => f.id)).toEqual(newestFirst);
  });

  it("takes at most `limit` a call and says more are left", async () => {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await insertJobFailure(t.pool));
    const upTo = ids.at(-1)!;
    const first = await retryAllJobFailures(db(), publisher, { upTo, limit: 3 });
    expect(first.retried.map((r) => r.id)).toEqual(ids.slice(0, 3));
    expect(first.more).toBe(true);
    const second = await retryAllJobFailures(db(), publisher, { upTo, limit: 3 });
    expect(second.retried.map((r) => r.id)).toEqual(ids.slice(3));
    expect(second.more).toBe(false);
    expect(jobsInQStash()).toHaveLength(5);
  });

  it("neither counts nor takes failures whose body is not a job, however many come first", async () => {
    // Recorded as the failure callback records them: deliveries to our route that were never ours.
    for (let i = 0; i < 3; i++) {
      await recordFailedJob(db(), {
        messageId: `msg_not_a_job_${i}`,
        url: `${PUBLIC_URL}/jobs/notify.mail`,
        body: JSON.stringify({ bogus: i }),
        status: 489,
        responseBody: "job body is not an edge-outbox job",
        retried: 0,
        dlqId: null,
      });
    }
    const ours = await insertJobFailure(t.pool);
    expect(await countOpenFailures(db(), { upTo: ours })).toBe(1);
    // The three come first, and would have filled a call of three.
    const result = await retryAllJobFailures(db(), publisher, { upTo: ours, limit: 3 });
    expect(result).toEqual({ retried: [{ id: ours, retryMessageId: expect.any(String) }], more: false });
    expect(await countOpenFailures(db(), { upTo: ours })).toBe(0);
  });

  it("bulk and single retries at once publish each failure once", async () => {
    const ids = [];
    for (let i = 0; i < 40; i++) ids.push(await insertJobFailure(t.pool));
    const upTo = ids.at(-1)!;
    paused.qstash.setPublishLatency(50);
    try {
      await Promise.all([
        retryAllJobFailures(db(), publisher, { upTo }),
        retryAllJobFailures(db(), publisher, { upTo }),
        ...ids.slice(0, 10).map((id) => retryJobFailure(db(), publisher, id)),
      ]);
    } finally {
      paused.qstash.setPublishLatency(0);
    }
    // Claims that lost a race retry nothing; a later call finds nothing left.
    await retryAllJobFailures(db(), publisher, { upTo });
    const recorded = await t.pool.query("SELECT retry_message_id FROM job_failures ORDER BY id");
    const messageIds = recorded.rows.map((r) => r.retry_message_id);
    expect(messageIds.every((m) => typeof m === "string")).toBe(true);
    expect(new Set(messageIds).size).toBe(40);
    expect(
      jobsInQStash()
        .map((m) => m.messageId)
        .sort(),
    ).toEqual([...messageIds].sort());
  });

  it("a publish QStash refuses leaves every failure of the call un-retried", async () => {
    const ids = [await insertJobFailure(t.pool), await insertJobFailure(t.pool)];
    paused.qstash.failNextPublishes(1, 500);
    await expect(retryAllJobFailures(db(), publisher, { upTo: ids[1]! })).rejects.toBeInstanceOf(
      PublishError,
    );
    for (const id of ids)
      expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect((await retryAllJobFailures(db(), publisher, { upTo: ids[1]! })).retried).toHaveLength(2);
  });
});

describe("a retry answers the failure's alert", () => {
  /** A failure as the callback records it: the row and its job.failed alert. */
  async function failedWithAlert(): Promise<{ id: number; messageId: string }> {
    const messageId = `msg_${crypto.randomUUID().replaceAll("-", "")}`;
    const body = relayJobBody("notify.mail");
    await recordJobFailure(db(), {
      messageId,
      subscription: "notify.mail",
      eventId: JSON.parse(body).event.id,
      status: 500,
      body,
      responseBody: "mail API down",
      dlqId: null,
      retried: 5,
    });
    const { rows } = await t.pool.query("SELECT id FROM job_failures WHERE message_id = $1", [messageId]);
    return { id: Number(rows[0].id), messageId };
  }
  /** The subscription's open job.failed alerts: their ids and counts. */
  const openAlerts = async () =>
    (
      await t.pool.query(
        `SELECT id::int, (details->>'count')::int AS count FROM outbox_alerts
          WHERE kind = 'job.failed' AND subscription = 'notify.mail' AND resolved_at IS NULL`,
      )
    ).rows as { id: number; count: number }[];

  // Each test starts with nothing owed: an earlier test's failures answered, their alerts resolved.
  beforeEach(async () => {
    await t.pool.query(
      "UPDATE job_failures SET retried_at = now(), retry_message_id = 'answered' WHERE retry_message_id IS NULL",
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
  });

  it("resolves the subscription's one alert once no failure it counts is owed", async () => {
    const [a, , c, d] = [
      await failedWithAlert(),
      await failedWithAlert(),
      await failedWithAlert(),
      await failedWithAlert(),
    ];
    const [alert] = await openAlerts();
    expect(alert).toEqual({ id: expect.any(Number), count: 4 });

    // One of four retried: the other three are still owed.
    expect((await retryJobFailure(db(), publisher, a.id)).retried).toBe(true);
    expect(await openAlerts()).toEqual([alert]);
    // Bulk up to c: d is still owed.
    expect((await retryAllJobFailures(db(), publisher, { upTo: c.id })).retried).toHaveLength(2);
    expect(await openAlerts()).toEqual([alert]);
    expect((await retryJobFailure(db(), publisher, d.id)).retried).toBe(true);
    expect(await openAlerts()).toEqual([]);
    // Resolved saying how: by hand it would read as it was.
    const { rows: resolved } = await t.pool.query(
      "SELECT message, details->>'resolvedBy' AS by FROM outbox_alerts WHERE id = $1",
      [alert!.id],
    );
    expect(resolved[0].message).toMatch(
      /^4 jobs for notify\.mail ran out of retries; .*; resolved: every job it counted was retried$/,
    );
    expect(resolved[0].by).toBe("retry");

    // The next failure raises a new alert, counting only itself.
    await failedWithAlert();
    const [next] = await openAlerts();
    expect(next!.count).toBe(1);
    expect(next!.id).not.toBe(alert!.id);
  });

  it("leaves it open when QStash did not take the job", async () => {
    const a = await failedWithAlert();
    paused.qstash.failNextPublishes(1, 500);
    await expect(retryJobFailure(db(), publisher, a.id)).rejects.toBeInstanceOf(PublishError);
    expect(await openAlerts()).toHaveLength(1);
    paused.qstash.failNextPublishes(1, 500);
    await expect(retryAllJobFailures(db(), publisher, { upTo: a.id })).rejects.toBeInstanceOf(PublishError);
    expect(await openAlerts()).toHaveLength(1);
  });

  it("never resolves it over a failure recorded while the retry runs, on another connection", async () => {
    const owed = await failedWithAlert();
    // A failure callback on a connection of its own has folded its failure into the
    // alert (holding the alert's row) but not committed when the operator's retry
    // of the last owed failure comes to resolve it.
    const callback = await t.newPool(1).connect();
    try {
      await callback.query("BEGIN");
      const arriving = `msg_${crypto.randomUUID().replaceAll("-", "")}`;
      const body = relayJobBody("notify.mail");
      await recordJobFailure(drizzle(callback) as unknown as Db, {
        messageId: arriving,
        subscription: "notify.mail",
        eventId: JSON.parse(body).event.id,
        status: 500,
        body,
        responseBody: null,
        dlqId: null,
        retried: 5,
      });
      const retry = retryJobFailure(db(), publisher, owed.id);
      await untilALockWait(t.pool);
      await callback.query("COMMIT");
      expect((await retry).retried).toBe(true);
    } finally {
      callback.release();
    }
    // The failure that arrived is owed, so the alert counting it stays open. (Without
    // the lock first, the resolve read the failures as of before its wait.)
    expect(await openAlerts()).toEqual([{ id: expect.any(Number), count: 2 }]);
  });
});

describe("the listing links a retry that failed again to the failure it retried", () => {
  it("failedAgainId on the retried one, retryOfId on the new one", async () => {
    const first = await insertJobFailure(t.pool);
    const result = await retryJobFailure(db(), publisher, first);
    if (!result.retried) throw new Error("retry refused");
    // The retried job runs out of retries too: the callback records it under its new id.
    await recordFailedJob(db(), {
      messageId: result.retryMessageId,
      url: `${PUBLIC_URL}/jobs/notify.mail`,
      body: published[0]!.json!,
      status: 0,
      responseBody: null,
      retried: 5,
      dlqId: null,
    });
    const [again, original] = await listJobFailures(db());
    expect(original).toMatchObject({ id: first, failedAgainId: again!.id, retryOfId: null });
    expect(again).toMatchObject({
      messageId: result.retryMessageId,
      retryOfId: first,
      failedAgainId: null,
      // No answer (QStash's 0) is recorded as none, and said so.
      status: null,
    });
    const { rows } = await t.pool.query(
      "SELECT message FROM outbox_alerts WHERE details->>'messageId' = $1",
      [result.retryMessageId],
    );
    expect(rows).toEqual([
      {
        message:
          `job ${result.retryMessageId} for notify.mail failed after 5 retries (no answer)` +
          ". Once the subscriber works, Retry on the job failures page (job-failures retry) sends it again",
      },
    ]);
  });
});
