import { Client } from "@upstash/qstash";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import type { Db } from "../../src/domain/db.ts";
import {
  collectDeadLetters,
  createQStashDeadLetters,
  DEAD_LETTER_PAGE,
} from "../../src/domain/job-failures/dead-letters.ts";
import { failedJobFromCallback, recordFailedJob } from "../../src/domain/job-failures/failed-job.ts";
import { fanOutWebhook } from "../../src/domain/webhooks/fanout.ts";
import { freePort } from "../../src/node/postgres.ts";
import { createQStashPublisher, deploymentLabel, jobUrl, type Job } from "../../src/outbox/index.ts";
import { parseConfig, type Config } from "../../src/worker/env.ts";
import { publisherFor } from "../../src/worker/relay.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { canaryQueueFor, deliverQueueFor } from "../../src/worker/webhooks.ts";
import { useTestDatabase } from "../support/db.ts";
import { insertEndpoint, useSecretsKey } from "../support/webhooks.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// A Worker that is down for the whole of a job's retries is down for its failure
// callback's retries too, so QStash's dead-letter queue holds the only trace of the
// job. Here the Worker's PUBLIC_URL is a port nothing listens on, QStash is the dev
// server (retry delays scaled to milliseconds), and the sweep runs once the Worker
// is "back": the sweep must find the dead letters, record each failure once, and
// take ours, and only ours, out of QStash.
const t = useTestDatabase();
const secrets = useSecretsKey();
let qstash: QStashDev;
let publicUrl: string;
let client: Client;

beforeAll(async () => {
  qstash = await startQStashDev({ log: () => undefined, timeScale: 0.001 });
  publicUrl = `http://127.0.0.1:${await freePort()}`;
  client = new Client({ baseUrl: qstash.url, token: qstash.token, retry: false, devMode: false });
});
afterAll(async () => {
  await qstash?.close();
});
beforeEach(async () => {
  qstash.reset();
  await t.pool.query("TRUNCATE job_failures, outbox_alerts, qstash_canaries");
  // A canary arrived just now, so no sweep here sends one (its dead letter, PUBLIC_URL
  // reaching nothing, would be in every count); the canary's own test starts without.
  await t.pool.query(
    "INSERT INTO qstash_canaries (id, sent_at, arrived_at) VALUES (gen_random_uuid(), now(), now())",
  );
});

const db = () => t.db as unknown as Db;
const env = () =>
  bindings({
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
    PUBLIC_URL: publicUrl,
    DATABASE_URL: t.url,
    // One webhook retry, a second (a millisecond at the dev server's time scale), so deliveries fail fast.
    WEBHOOK_RETRY_SCHEDULE: "1",
  });
/** The configuration the Worker reads from those bindings: its publishers label jobs as the Worker's do. */
function config(overrides: Partial<ReturnType<typeof env>> = {}): Config {
  const parsed = parseConfig({ ...env(), ...overrides });
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.config;
}

async function sweep(overrides: Partial<ReturnType<typeof env>> = {}): Promise<string> {
  const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
  try {
    await createScheduled(openTestPool(t.pool))(
      {} as ScheduledController,
      { ...env(), ...overrides },
      executionContext().ctx,
    );
    return String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
  } finally {
    log.mockRestore();
  }
}

/** Publishes subscriber jobs with the relay's publisher, with one retry each so they fail fast. */
async function publishJobs(
  subscription: string,
  count: number,
  publisher = publisherFor(config()),
): Promise<{ ids: string[]; jobs: Job[] }> {
  const jobs: Job[] = Array.from({ length: count }, () => {
    const id = crypto.randomUUID();
    return {
      subscription,
      deduplicationId: `${id}:${subscription}`,
      body: {
        subscription,
        event: {
          id,
          seq: 1,
          type: "corpus.note.updated",
          subject: crypto.randomUUID(),
          scope: null,
          payload: { title: "lost while the Worker was down" },
          createdAt: new Date().toISOString(),
        },
        coalesced: [],
      },
      retries: 1,
    };
  });
  const published = await publisher.publish(jobs, new AbortController().signal);
  return { ids: published.map((p) => p.messageId), jobs };
}

/** Waits until `count` messages of `kind` have been dead-lettered. */
async function deadLettered(kind: "publish" | "failure-callback", count: number) {
  return qstash.waitFor((all) => {
    const dead = all.filter((m) => m.kind === kind && m.state === "ERROR");
    return dead.length >= count ? dead : undefined;
  }, 30_000);
}

async function dlqUrls(): Promise<string[]> {
  const urls: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.dlq.listMessages(cursor ? { cursor } : {});
    urls.push(...page.messages.map((m) => m.url));
    cursor = page.cursor;
  } while (cursor);
  return urls.sort();
}

async function failures() {
  const { rows } = await t.pool.query(
    'SELECT message_id, subscription, event_id, status, body FROM job_failures ORDER BY message_id COLLATE "C"',
  );
  return rows;
}

describe("the sweep records jobs whose failure callback never reached us", () => {
  it("finds them in QStash's dead-letter queue, records each once, and leaves other destinations' letters", async () => {
    const { ids, jobs } = await publishJobs("corpus.index", 2);
    // Someone else's message on the same QStash account, dead-lettered too.
    const foreign = `${publicUrl}/elsewhere`;
    await client.publishJSON({ url: foreign, body: { not: "ours" }, retries: 0 });
    // And one with our label but not sent to a job route of ours: not ours either.
    await client.publishJSON({
      url: foreign,
      body: { labelled: true },
      retries: 0,
      label: deploymentLabel(publicUrl),
    });
    await deadLettered("publish", 4);
    // The job and its failure callback both ran out of retries against the dead Worker.
    await deadLettered("failure-callback", 2);
    expect(await failures()).toEqual([]);

    const line = await sweep();
    expect(line).toContain("dead letters: 4 taken from QStash, 2 of them new failures");
    const recorded = await failures();
    expect(recorded).toEqual(
      ids
        .map((messageId, i) => ({
          message_id: messageId,
          subscription: "corpus.index",
          event_id: jobs[i]!.body.event.id,
          // Nothing answered: the connection was refused.
          status: null,
          body: JSON.stringify(jobs[i]!.body),
        }))
        .sort((a, b) => (a.message_id < b.message_id ? -1 : 1)),
    );
    // One alert for the subscription counts both (ADR 0037), naming the latest recorded.
    const { rows: newest } = await t.pool.query(
      "SELECT message_id, event_id FROM job_failures ORDER BY id DESC LIMIT 1",
    );
    const { rows: alerts } = await t.pool.query(
      "SELECT kind, event_id, subscription, message, (details->>'count')::int AS count FROM outbox_alerts",
    );
    expect(alerts).toEqual([
      {
        kind: "job.failed",
        event_id: newest[0].event_id,
        subscription: "corpus.index",
        // The letter's own retries: the one the job was published with.
        message:
          `2 jobs for corpus.index ran out of retries; the latest: job ${newest[0].message_id} failed after 1 retry (no answer)` +
          ". Once the subscriber works, Retry on the job failures page (job-failures retry) sends them again",
        count: 2,
      },
    ]);
    expect(ids).toContain(newest[0].message_id);
    // Ours are gone from QStash; the other destination's letters are untouched.
    expect(await dlqUrls()).toEqual([foreign, foreign]);

    // Nothing twice: not from a second sweep, nor from the callback arriving late after all.
    expect(await sweep()).toContain("dead letters: 0 taken from QStash, 0 of them new failures");
    const callback = qstash.messages().find((m) => m.kind === "failure-callback");
    const late = failedJobFromCallback(callback!.body);
    expect(late?.messageId).toBe(callback!.sourceMessageId);
    expect(await recordFailedJob(db(), late!)).toEqual({ recorded: false });
    expect(await failures()).toHaveLength(2);
  });

  it("a callback that arrived records the job; its dead letters then add nothing and are taken out", async () => {
    const { ids } = await publishJobs("notify.mail", 1);
    const [callback] = await deadLettered("failure-callback", 1);
    // The callback as the route would have recorded it, had the Worker been up.
    expect(await recordFailedJob(db(), failedJobFromCallback(callback!.body)!)).toEqual({ recorded: true });
    expect(await sweep()).toContain("dead letters: 2 taken from QStash, 0 of them new failures");
    expect((await failures()).map((f) => f.message_id)).toEqual(ids);
    expect(await dlqUrls()).toEqual([]);
  });

  it("fails a webhook delivery whose deliver job dead-lettered, with its alert", async () => {
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: "https://receiver.example/hook" });
    const queue = deliverQueueFor(config());
    const event = {
      id: crypto.randomUUID(),
      type: "corpus.note.updated",
      subject: crypto.randomUUID(),
      scope: null,
      payload: { title: "hello" },
      createdAt: new Date().toISOString(),
    };
    await fanOutWebhook(db(), queue, event);
    const { rows: before } = await t.pool.query(
      "SELECT id, status, message_id FROM webhook_deliveries WHERE event_id = $1",
      [event.id],
    );
    expect(before).toEqual([expect.objectContaining({ status: "pending" })]);
    await deadLettered("failure-callback", 1);

    await sweep();
    const { rows: after } = await t.pool.query(
      "SELECT status, failed_at FROM webhook_deliveries WHERE id = $1",
      [before[0].id],
    );
    expect(after).toEqual([{ status: "failed", failed_at: expect.any(Date) }]);
    const { rows: alerts } = await t.pool.query(
      "SELECT kind, details->>'deliveryId' AS delivery, details->>'endpointId' AS endpoint, details->>'messageId' AS message FROM outbox_alerts",
    );
    expect(alerts).toEqual([
      {
        kind: "webhook.delivery_failed",
        delivery: before[0].id,
        endpoint: endpoint.id,
        message: before[0].message_id,
      },
    ]);
    // A dead delivery is not a subscriber job: job_failures stays empty.
    expect(await failures()).toEqual([]);
    expect(await dlqUrls()).toEqual([]);
  });

  it("a record that fails deletes nothing: the letters wait in QStash for the next sweep", async () => {
    const { ids } = await publishJobs("corpus.index", 1);
    await deadLettered("failure-callback", 1);
    await t.pool.query(`
      CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'job_failures is refusing rows'; END $$;
      CREATE TRIGGER refuse BEFORE INSERT ON job_failures FOR EACH ROW EXECUTE FUNCTION refuse();`);
    try {
      const error = vi.spyOn(console, "error").mockImplementation(() => undefined);
      await expect(sweep()).rejects.toThrow(/"dead letters" step: .*job_failures is refusing rows/);
      error.mockRestore();
      expect(await dlqUrls()).toEqual([jobUrl(publicUrl, "_failed"), jobUrl(publicUrl, "corpus.index")]);
    } finally {
      await t.pool.query("DROP TRIGGER refuse ON job_failures; DROP FUNCTION refuse()");
    }
    await sweep();
    expect((await failures()).map((f) => f.message_id)).toEqual(ids);
    expect(await dlqUrls()).toEqual([]);
  });

  it("QStash out of reach stops only the reading: the sweep ends well and says so", async () => {
    const { ids } = await publishJobs("corpus.index", 1);
    await deadLettered("failure-callback", 1);
    const line = await sweep({ QSTASH_URL: `http://127.0.0.1:${await freePort()}` });
    expect(line).toMatch(/dead letters: 0 taken from QStash, 0 of them new failures \(stopped: fetch failed/);
    // The rest of the sweep ran, to its log line's end.
    expect(line).toMatch(/re-published 0 webhook deliveries .* ms$/);
    expect(await failures()).toEqual([]);
    // Back: the letters were waiting.
    expect(await sweep()).toContain("dead letters: 2 taken from QStash, 1 of them new failures;");
    expect((await failures()).map((f) => f.message_id)).toEqual(ids);
  });

  it("works off a backlog a bounded number of pages per sweep", async () => {
    const count = DEAD_LETTER_PAGE + 30;
    await publishJobs("corpus.index", count);
    await deadLettered("failure-callback", count);
    const dlq = createQStashDeadLetters({ baseUrl: qstash.url, token: qstash.token });
    const owner = { label: deploymentLabel(publicUrl), publicUrl };
    // One page: the oldest hundred with our label (the jobs').
    expect(await collectDeadLetters(db(), dlq, owner, { pages: 1 })).toEqual({
      recorded: DEAD_LETTER_PAGE,
      removed: DEAD_LETTER_PAGE,
    });
    expect(await failures()).toHaveLength(DEAD_LETTER_PAGE);
    // A sweep's budget: the label's pages and the failure callback's, in turns.
    // The rest of the jobs, and every callback's letter (already recorded from the jobs' own).
    expect(await collectDeadLetters(db(), dlq, owner)).toEqual({ recorded: 30, removed: 30 + count });
    expect(await failures()).toHaveLength(count);
    expect(await dlqUrls()).toEqual([]);
  });
});

describe("a failure storm's dead letters", () => {
  it("are recorded in a statement per kind, however many, with one alert for the endpoint and one for the subscription", async () => {
    // The only endpoint: an earlier test's would take every event too.
    await t.pool.query("DELETE FROM webhook_endpoints");
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: "https://receiver.example/storm" });
    const queue = deliverQueueFor(config());
    for (let i = 0; i < 40; i++) await fanOutWebhook(db(), queue, anEvent());
    const { ids } = await publishJobs("corpus.index", 60);
    // Each job and each failure callback dead-lettered: 200 letters.
    await deadLettered("failure-callback", 100);

    // The sweep's statements, counted on a pool of its own.
    const pool = t.newPool(1);
    let statements = 0;
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    (pool as { query: unknown }).query = (...args: unknown[]) => {
      statements++;
      return query(...args);
    };
    const dlq = createQStashDeadLetters({ baseUrl: qstash.url, token: qstash.token });
    const owner = { label: deploymentLabel(publicUrl), publicUrl };
    expect(await collectDeadLetters(drizzle(pool) as unknown as Db, dlq, owner)).toEqual({
      recorded: 100,
      removed: 200,
    });
    // One for the deliveries, one for the other jobs (it was one per letter: a
    // thousand letters made a sweep of over a minute on a database far away).
    expect(statements).toBe(2);

    expect((await failures()).map((f) => f.message_id).sort()).toEqual([...ids].sort());
    const { rows } = await t.pool.query(
      `SELECT kind, count(*)::int AS alerts, sum((details->>'count')::int)::int AS counted
         FROM outbox_alerts WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind`,
    );
    expect(rows).toEqual([
      // One per subscription (ADR 0037); it was one per failed job.
      { kind: "job.failed", alerts: 1, counted: 60 },
      { kind: "webhook.delivery_failed", alerts: 1, counted: 40 },
    ]);
    const failed = await t.pool.query(
      "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'",
      [endpoint.id],
    );
    expect(failed.rows[0].n).toBe(40);
    expect(await dlqUrls()).toEqual([]);
  });
});

/** An event as fan-out reads it, for a deliver job. */
const anEvent = () => ({
  id: crypto.randomUUID(),
  type: "corpus.note.updated",
  subject: crypto.randomUUID(),
  scope: null,
  payload: {},
  createdAt: new Date().toISOString(),
});

describe("dead letters are ours by the deployment's label", () => {
  it("a job of a subscription since removed is found by its label and recorded under its name", async () => {
    // A subscription the deployment no longer has: no listing by URL would ask for it.
    const { ids } = await publishJobs("retired.subscription", 1);
    await deadLettered("failure-callback", 1);
    expect(await sweep()).toContain("dead letters: 2 taken from QStash, 1 of them new failures;");
    expect(await failures()).toEqual([
      expect.objectContaining({ message_id: ids[0], subscription: "retired.subscription" }),
    ]);
    expect(await dlqUrls()).toEqual([]);
  });

  it("a canary's letter is taken as what its URL answered, for the canary's alert, and is no job failure", async () => {
    await t.pool.query("TRUNCATE qstash_canaries");
    // The sweep's first canary goes to this PUBLIC_URL, where nothing listens.
    expect(await sweep()).toMatch(
      /; canary: sent; waiting for one sent at \S+; alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/,
    );
    await deadLettered("publish", 1);
    // Five minutes on (moved, not waited): the next sweep reads the letter and sends another.
    await t.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '5 minutes'");
    expect(await sweep()).toMatch(
      /dead letters: 1 taken from QStash, 0 of them new failures;.*; canary: sent; waiting for one sent at \S+; /,
    );
    expect(await failures()).toEqual([]);
    // The first canary's letter was taken; the one this sweep sent is the next sweep's.
    await deadLettered("publish", 2);
    expect(await dlqUrls()).toEqual([`${publicUrl}/jobs/_canary`]);
    // A minute on, two in a row have not arrived.
    await t.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '1 minute'");
    expect(await sweep()).toMatch(
      /dead letters: 1 taken from QStash, 0 of them new failures;.*; canary: none due; jobs not arriving since \S+ \(alert raised\); alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/,
    );
    const { rows } = await t.pool.query(
      "SELECT message FROM outbox_alerts WHERE kind = 'jobs.not_arriving' AND resolved_at IS NULL",
    );
    expect(rows[0].message).toContain(
      " QStash could not reach that URL (no answer). Check that PUBLIC_URL is this Worker's address and that it is up. ",
    );
  });

  it("every job the Worker publishes carries the label, QSTASH_LABEL's when it is set", async () => {
    // One endpoint, so each fan-out is one deliver job.
    await t.pool.query("TRUNCATE webhook_endpoints CASCADE");
    await insertEndpoint(t.pool, secrets.key, { url: "https://receiver.example/labelled" });
    await publishJobs("corpus.index", 1);
    await fanOutWebhook(db(), deliverQueueFor(config()), anEvent());
    const named = config({ QSTASH_LABEL: "edge-outbox-staging" });
    await publishJobs("notify.mail", 1, publisherFor(named));
    await fanOutWebhook(db(), deliverQueueFor(named), anEvent());
    await canaryQueueFor(named).send({ canaryId: crypto.randomUUID(), label: "edge-outbox-staging" });
    const published = qstash.messages().filter((m) => m.kind === "publish");
    const byUrl = await Promise.all(
      published.map(async (m) => {
        const res = await fetch(`${qstash.url}/v2/messages/${m.messageId}`, {
          headers: { authorization: `Bearer ${qstash.token}` },
        });
        const view = (await res.json()) as { url: string; labels?: string[] };
        return [new URL(view.url).pathname, view.labels];
      }),
    );
    expect(byUrl.sort()).toEqual(
      [
        ["/jobs/_canary", ["edge-outbox-staging"]],
        ["/jobs/corpus.index", [deploymentLabel(publicUrl)]],
        ["/jobs/notify.mail", ["edge-outbox-staging"]],
        ["/jobs/webhook.deliver", [deploymentLabel(publicUrl)]],
        ["/jobs/webhook.deliver", ["edge-outbox-staging"]],
      ].sort(),
    );
  });

  it("a queue full of letters under our label that are not ours does not hide ours", async () => {
    // A deployment elsewhere that, by mistake, shares our label: more letters than a page.
    const elsewhere = "http://127.0.0.1:9/jobs/corpus.index";
    await client.batchJSON(
      Array.from({ length: DEAD_LETTER_PAGE + 5 }, (_, i) => ({
        url: elsewhere,
        body: { i },
        retries: 0,
        label: deploymentLabel(publicUrl),
      })),
    );
    await deadLettered("publish", DEAD_LETTER_PAGE + 5);
    const { ids } = await publishJobs("corpus.index", 1);
    await deadLettered("failure-callback", 1);
    expect(await sweep()).toContain("dead letters: 2 taken from QStash, 1 of them new failures;");
    expect((await failures()).map((f) => f.message_id)).toEqual(ids);
    const left = await dlqUrls();
    expect(left).toHaveLength(DEAD_LETTER_PAGE + 5);
    expect(new Set(left)).toEqual(new Set([elsewhere]));
  });
});

describe("QSTASH_LABEL", () => {
  it("defaults to one made from PUBLIC_URL's host, and takes only what a label header carries as it is", () => {
    expect(deploymentLabel("https://edge.example.com/app")).toBe("edge-outbox-edge-example-com");
    expect(deploymentLabel("http://127.0.0.1:8787")).toBe("edge-outbox-127-0-0-1-8787");
    expect(config({ QSTASH_LABEL: " edge-outbox-prod " }).QSTASH_LABEL).toBe("edge-outbox-prod");
    expect(config({ QSTASH_LABEL: "" }).QSTASH_LABEL).toBeUndefined();
    for (const value of ["prod,staging", "edge outbox", "édge", "edge.prod"]) {
      expect(parseConfig({ ...env(), QSTASH_LABEL: value })).toEqual({
        ok: false,
        message: `Worker misconfigured: binding QSTASH_LABEL must be letters, digits, "_" or "-", e.g. edge-outbox-prod`,
      });
    }
    expect(() => createQStashPublisher({ baseUrl: qstash.url, token: "t", publicUrl, label: "a,b" })).toThrow(
      /label must be letters, digits/,
    );
  });
});

describe("what the sweep takes for ours, whatever QStash answers", () => {
  it("a letter that names other labels is left, even on our job route, should QStash ignore the filter", async () => {
    const label = deploymentLabel(publicUrl);
    const letter = (dlqId: string, labels: string[] | null) => ({
      dlqId,
      messageId: `msg_${dlqId}`,
      url: jobUrl(publicUrl, "corpus.index"),
      labels,
      body: "{}",
      responseStatus: 500,
      responseBody: null,
      maxRetries: 1,
    });
    const removed: string[] = [];
    // A queue that answers every listing with everything it holds, filter or not.
    const unfiltered = {
      list: async () => ({
        letters: [letter("theirs", ["edge-outbox-other"]), letter("ours", [label]), letter("unsaid", null)],
      }),
      remove: async (ids: string[]) => void removed.push(...ids),
    };
    expect(await collectDeadLetters(db(), unfiltered, { label, publicUrl })).toEqual({
      recorded: 2,
      removed: 2,
    });
    expect(removed.sort()).toEqual(["ours", "unsaid"]);
    expect((await failures()).map((f) => f.message_id).sort()).toEqual(["msg_ours", "msg_unsaid"]);
  });
});
