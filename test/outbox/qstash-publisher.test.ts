// The production publisher, through the real @upstash/qstash client, to the local
// QStash-compatible dev server, which delivers to a real HTTP receiver, and to the
// accept-only endpoint where a test needs to see requests in flight.
import { Receiver } from "@upstash/qstash";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  createQStashPublisher,
  defineSubscriptions,
  runPass,
  type JobBody,
  type Publisher,
} from "../../src/outbox/index.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { startAcceptOnlyQStash, type AcceptOnlyQStash } from "../../infra/qstash-accept-only.ts";
import { startReceiver } from "../qstash-dev/receiver.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
let qstash: QStashDev;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let publisher: Publisher;
const subscriptions = defineSubscriptions([
  { name: "notify.mail", types: ["supplier.*"], retries: 2 },
  { name: "corpus.index", types: ["supplier.*"], coalesce: true },
]);

beforeAll(async () => {
  qstash = await startQStashDev({ timeScale: 0.001 });
  receiver = await startReceiver();
  publisher = createQStashPublisher({ baseUrl: qstash.url, token: qstash.token, publicUrl: receiver.base });
});
afterAll(async () => {
  await qstash?.close();
  await receiver?.close();
});
beforeEach(async () => {
  await resetOutbox(t.pool);
  qstash.reset();
  receiver.reset();
});

describe("QStash publisher", () => {
  it("delivers one signed job per (event, subscription) to <PUBLIC_URL>/jobs/<subscription>", async () => {
    const [first, second] = await seedEvents(t.pool, 2, {
      type: "supplier.connected",
      subject: () => "sup-1",
    });
    const pass = await runPass({ pool: t.pool, publisher, subscriptions });
    expect(pass).toMatchObject({ fanned: 2, jobs: 3 });

    const mail = await receiver.waitForRequests(2, "/jobs/notify.mail");
    const index = await receiver.waitForRequests(1, "/jobs/corpus.index");
    const bodies = mail.map((r) => JSON.parse(r.body) as JobBody);
    expect(bodies.map((b) => b.event.id).sort()).toEqual([first, second].sort());
    expect((JSON.parse(index[0]!.body) as JobBody).coalesced).toEqual([first]);

    const verifier = new Receiver({
      currentSigningKey: qstash.currentSigningKey,
      nextSigningKey: qstash.nextSigningKey,
    });
    for (const r of [...mail, ...index]) {
      const valid = await verifier.verify({
        signature: String(r.headers["upstash-signature"]),
        body: r.body,
        url: receiver.url(r.path),
      });
      expect(valid).toBe(true);
    }

    // The fanout column names the message QStash accepted for each subscription.
    const rows = await eventStates(t.pool);
    const mailIds = rows.map((r) => (r.fanout!["notify.mail"] as { messageId: string }).messageId);
    expect(mail.map((r) => r.headers["upstash-message-id"]).sort()).toEqual(mailIds.sort());
    expect(qstash.message(mailIds[0]!)!.maxRetries).toBe(2);
  });

  it("sends a job that exhausted its retries to the failure callback, <PUBLIC_URL>/jobs/_failed", async () => {
    const [event] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
    receiver.state.respond = (r) => (r.path === "/jobs/notify.mail" ? { status: 500 } : { status: 200 });
    await runPass({ pool: t.pool, publisher, subscriptions });
    const [callback] = await receiver.waitForRequests(1, "/jobs/_failed");
    // One first try plus the subscription's two retries.
    expect(receiver.received.filter((r) => r.path === "/jobs/notify.mail")).toHaveLength(3);
    const failure = JSON.parse(callback!.body) as { status: number; sourceBody: string; maxRetries: number };
    expect(failure).toMatchObject({ status: 500, maxRetries: 2 });
    const job = JSON.parse(Buffer.from(failure.sourceBody, "base64").toString("utf8")) as JobBody;
    expect(job).toMatchObject({ subscription: "notify.mail", event: { id: event } });
  });

  it("a pass replayed after a crash republishes with the same ids, and QStash delivers each job once", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.activated" });
    const crashing: Publisher = {
      async publish(jobs, signal) {
        const answers = await publisher.publish(jobs, signal);
        await t.pool.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND state = 'idle in transaction'`,
        );
        return answers;
      },
    };
    const relayPool = t.newPool(1);
    await expect(runPass({ pool: relayPool, publisher: crashing, subscriptions })).rejects.toThrow();
    expect(await unfannedCount(t.pool)).toBe(3);

    const replay = await runPass({ pool: relayPool, publisher, subscriptions });
    expect(replay.fanned).toBe(3);
    const rows = await eventStates(t.pool);
    expect(
      rows.every((r) => (r.fanout!["notify.mail"] as { deduplicated?: boolean }).deduplicated === true),
    ).toBe(true);

    await receiver.waitForRequests(6);
    // Let every accepted message settle before counting deliveries.
    await qstash.waitFor((all) => all.length === 6 && all.every((m) => m.state === "DELIVERED"));
    expect(receiver.received).toHaveLength(6);
    const perJob = new Map<string, number>();
    for (const r of receiver.received) {
      const body = JSON.parse(r.body) as JobBody;
      const key = `${body.event.id}:${body.subscription}`;
      perJob.set(key, (perJob.get(key) ?? 0) + 1);
    }
    expect([...perJob.values()]).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it("classifies QStash's answers: a 503 is an outage, a 400 is the row's own error", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.connected" });
    const now = new Date(Date.now() + 1000);
    qstash.failNextPublishes(1, 503);
    const down = await runPass({ pool: t.pool, publisher, subscriptions, now });
    expect(down.error).toMatch(/QStash 503/);
    expect(down.backedOffUntil).not.toBeNull();

    // Row by row after the failure: the first row's publish is refused as invalid.
    qstash.failNextPublishes(1, 400);
    const rows = await runPass({ pool: t.pool, publisher, subscriptions, now: down.backedOffUntil! });
    expect(rows).toMatchObject({ mode: "rows", fanned: 2, failed: 1, backedOffUntil: null });
    const [charged] = await eventStates(t.pool);
    expect(charged).toMatchObject({ attempts: 1, fanned_out_at: null });
    expect(charged!.last_error).toMatch(/QStash 400/);
  });
});

describe("delivery parallelism", () => {
  it("every job carries one flow-control key per deployment, so QStash bounds concurrent deliveries", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.created" });
    const bounded = createQStashPublisher({
      baseUrl: qstash.url,
      token: qstash.token,
      publicUrl: receiver.base,
      deliveryParallelism: 2,
    });
    await runPass({ pool: t.pool, publisher: bounded, subscriptions });
    const jobs = qstash.messages().filter((m) => m.kind === "publish");
    expect(jobs.length).toBe(6);
    const host = new URL(receiver.base).host.replace(/[^A-Za-z0-9._-]/g, "_");
    expect(new Set(jobs.map((m) => m.flowControlKey))).toEqual(new Set([`edge-outbox-${host}`]));
  });
});

describe("a pass's chunks, sent concurrently", () => {
  let accept: AcceptOnlyQStash;
  const all = defineSubscriptions([{ name: "all", types: ["*"] }]);
  const through = (options: { concurrency?: number } = {}) =>
    createQStashPublisher({
      baseUrl: accept.url,
      token: accept.token,
      publicUrl: receiver.base,
      chunkSize: 2,
      ...options,
    });

  beforeAll(async () => {
    accept = await startAcceptOnlyQStash({ delayMs: 200 });
  });
  afterAll(async () => {
    await accept?.close();
  });
  beforeEach(() => accept.reset());

  it("keeps each message id with its own job across chunks sent together", async () => {
    await seedEvents(t.pool, 9, { type: "supplier.created" });
    const chunked = createQStashPublisher({
      baseUrl: qstash.url,
      token: qstash.token,
      publicUrl: receiver.base,
      chunkSize: 2,
    });
    const pass = await runPass({ pool: t.pool, publisher: chunked, subscriptions: all });
    expect(pass).toMatchObject({ mode: "batch", fanned: 9, jobs: 9 });
    for (const row of await eventStates(t.pool)) {
      const { messageId } = row.fanout!["all"] as { messageId: string };
      const job = JSON.parse(qstash.message(messageId)!.body) as JobBody;
      expect(job.event.id).toBe(row.id);
    }
  });

  it("has at most `concurrency` batch requests in flight, 3 by default", async () => {
    await seedEvents(t.pool, 9);
    // 9 jobs in chunks of 2: five requests, each held 200 ms by the endpoint.
    const pass = await runPass({ pool: t.pool, publisher: through(), subscriptions: all });
    expect(pass).toMatchObject({ fanned: 9, jobs: 9 });
    expect(accept.stats()).toMatchObject({ requests: 5, messages: 9, maxInFlight: 3 });

    await resetOutbox(t.pool);
    accept.reset();
    await seedEvents(t.pool, 9);
    await runPass({ pool: t.pool, publisher: through({ concurrency: 1 }), subscriptions: all });
    expect(accept.stats()).toMatchObject({ requests: 5, maxInFlight: 1 });
  });

  it("a failing chunk fails the whole batch as before: no chunk starts after it, nothing is marked", async () => {
    await seedEvents(t.pool, 9);
    const publisher = through();
    // The second request is refused at once; the two others in flight are accepted.
    accept.failNext(1, 503, 1);
    const pass = await runPass({ pool: t.pool, publisher, subscriptions: all });
    expect(pass).toMatchObject({ mode: "batch", fanned: 0, claimed: 9 });
    expect(pass.error).toMatch(/QStash 503/);
    expect(pass.backedOffUntil).not.toBeNull();
    expect(await unfannedCount(t.pool)).toBe(9);
    // Three chunks went out together; the other two never started.
    expect(accept.stats()).toMatchObject({ requests: 3, messages: 4 });

    // The next pass retries the rows one by one (ADR 0003) and publishes them all.
    // (1 ms on: Postgres keeps microseconds that the Date dropped.)
    const later = new Date(pass.backedOffUntil!.getTime() + 1);
    const retry = await runPass({ pool: t.pool, publisher, subscriptions: all, now: later });
    expect(retry).toMatchObject({ mode: "rows", fanned: 9, failed: 0, backedOffUntil: null });
  });

  it("a rejected chunk is not charged to any row in a batch pass", async () => {
    await seedEvents(t.pool, 9);
    accept.failNext(1, 400, 2);
    const pass = await runPass({ pool: t.pool, publisher: through(), subscriptions: all });
    expect(pass.error).toMatch(/QStash 400/);
    expect((await eventStates(t.pool)).every((r) => r.attempts === 0 && r.fanned_out_at === null)).toBe(true);
  });

  it("a publish the relay gave up on starts no further chunk", async () => {
    await seedEvents(t.pool, 9);
    const pass = await runPass({
      pool: t.pool,
      publisher: through({ concurrency: 1 }),
      subscriptions: all,
      publishTimeoutMs: 50,
    });
    expect(pass.error).toMatch(/publish gave up/);
    // The chunk in flight when the relay gave up is answered; none follows it.
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(accept.stats()).toMatchObject({ requests: 1, maxInFlight: 1 });
    expect(await unfannedCount(t.pool)).toBe(9);
  });
});
