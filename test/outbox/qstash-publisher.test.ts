// The production publisher, through the real @upstash/qstash client, to the local
// QStash-compatible dev server, which delivers to a real HTTP receiver, and to the
// accept-only endpoint where a test needs to see requests in flight.
import { Client, Receiver } from "@upstash/qstash";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  createQStashPublisher,
  defineSubscriptions,
  failureCallbackUrl,
  subscriptionFlowControl,
  jobUrl,
  PublishError,
  runPass,
  type Job,
  type JobBody,
  type Publisher,
} from "../../src/outbox/index.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { startAcceptOnlyQStash, type AcceptOnlyQStash } from "../../infra/qstash-accept-only.ts";
import { freePort } from "../../src/node/postgres.ts";
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

  // The other statuses kindOfStatus reads as the request's own fault, through the
  // SDK's error as the relay meets it: a wrong entry would retry a hopeless row for
  // ever as an outage, backing the whole relay off each time.
  it.each([413, 414, 422])(
    "QStash answering %i to one row's publish charges that row alone in a rows pass",
    async (status) => {
      await seedEvents(t.pool, 3, { type: "supplier.connected" });
      const now = new Date(Date.now() + 1000);
      qstash.failNextPublishes(1, 503);
      const down = await runPass({ pool: t.pool, publisher, subscriptions, now });
      expect(down.error).toMatch(/QStash 503/);

      qstash.failNextPublishes(1, status);
      const rows = await runPass({ pool: t.pool, publisher, subscriptions, now: down.backedOffUntil! });
      expect(rows).toMatchObject({ mode: "rows", fanned: 2, failed: 1, backedOffUntil: null });
      expect(rows.error).toBeUndefined();
      const [charged, ...others] = await eventStates(t.pool);
      expect(charged).toMatchObject({ attempts: 1, fanned_out_at: null });
      expect(charged!.last_error).toMatch(new RegExp(`QStash ${status}`));
      expect(others.map((r) => [r.attempts, r.fanned_out_at !== null])).toEqual([
        [0, true],
        [0, true],
      ]);
    },
  );

  it("an unreachable QStash is an outage, never a row's fault: a rows pass charges no row", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.connected" });
    // Nothing listens on a free port: the connection is refused and no HTTP status
    // comes back at all, as when QStash or the network to it is down.
    const unreachable = createQStashPublisher({
      baseUrl: `http://127.0.0.1:${await freePort()}`,
      token: qstash.token,
      publicUrl: receiver.base,
    });
    const now = new Date(Date.now() + 1000);
    const batch = await runPass({ pool: t.pool, publisher: unreachable, subscriptions, now });
    expect(batch).toMatchObject({ mode: "batch", fanned: 0, failed: 0 });
    expect(batch.error).toMatch(/QStash unreachable/);

    // Row by row after the failure: the first row's publish fails the same way, which
    // says nothing about that row (guarantee 5), so the pass stops there, charging none.
    const rows = await runPass({
      pool: t.pool,
      publisher: unreachable,
      subscriptions,
      now: batch.backedOffUntil!,
    });
    expect(rows).toMatchObject({ mode: "rows", fanned: 0, failed: 0, poisoned: [] });
    expect(rows.error).toMatch(/QStash unreachable/);
    expect(rows.backedOffUntil).not.toBeNull();
    expect(
      (await eventStates(t.pool)).map((r) => ({
        attempts: r.attempts,
        error: r.last_error,
        fanned: r.fanned_out_at,
      })),
    ).toEqual(Array(3).fill({ attempts: 0, error: null, fanned: null }));
  });
});

describe("delivery parallelism", () => {
  it("every job carries its subscription's flow-control key, so QStash bounds each subscription's concurrent deliveries", async () => {
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
    for (const job of jobs) {
      const subscription = JSON.parse(job.body).subscription as string;
      expect(job.flowControlKey).toBe(`edge-outbox-jobs-${subscription}-${host}`);
    }
    // Two subscriptions matched: two budgets.
    expect(new Set(jobs.map((m) => m.flowControlKey)).size).toBe(2);
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

  it("sends a pass of 200 events with two subscriptions (250 jobs) as one request by default", async () => {
    await seedEvents(t.pool, 200, {
      type: "supplier.created",
      subject: (i) => `sup-${Math.floor((i - 1) / 4)}`,
    });
    const publisher = createQStashPublisher({
      baseUrl: accept.url,
      token: accept.token,
      publicUrl: receiver.base,
    });
    const pass = await runPass({ pool: t.pool, publisher, subscriptions, batchSize: 200 });
    expect(pass).toMatchObject({ fanned: 200, jobs: 250 });
    expect(accept.stats()).toMatchObject({ requests: 1, messages: 250 });
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

describe("what a batch request carries", () => {
  // A stand-in for QStash's API that keeps every request's bytes and answers one id per message.
  let api: Awaited<ReturnType<typeof startReceiver>>;
  const publicUrl = "https://edge.example.com/app/";
  const token = "api-token";
  const jobs: Job[] = [
    {
      subscription: "notify.mail",
      deduplicationId: "0190b6d2-7a1e-7cc0-8000-000000000001:notify.mail",
      // Quotes, backslashes, a newline, non-ASCII and U+2028 inside the body's strings.
      json: '{"subscription":"notify.mail","event":{"payload":{"t":"\\"é\\n\u2028"}},"coalesced":[]}',
      retries: 2,
      body: undefined as never,
    },
    {
      subscription: "corpus.index",
      deduplicationId: "0190b6d2-7a1e-7cc0-8000-000000000002:corpus.index",
      json: '{"subscription":"corpus.index","event":{},"coalesced":["a"]}',
      body: undefined as never,
    },
    // A custom caller's job with no `json`: its body is serialised as before.
    {
      subscription: "notify.mail",
      deduplicationId: "0190b6d2-7a1e-7cc0-8000-000000000003:notify.mail",
      body: { subscription: "notify.mail", event: {} as JobBody["event"], coalesced: [] },
      retries: 0,
    },
  ];

  beforeAll(async () => {
    api = await startReceiver();
  });
  afterAll(async () => {
    await api?.close();
  });
  beforeEach(() => {
    api.reset();
    api.state.respond = (r) => ({
      status: 200,
      headers: { "content-type": "application/json" },
      body: JSON.stringify((JSON.parse(r.body) as unknown[]).map((_, i) => ({ messageId: `msg_${i}` }))),
    });
  });

  it("is, byte for byte, the request the SDK's client.batch sends for the same jobs", async () => {
    // What the publisher sent through client.batch until ADR 0018, message by message.
    const sdk = new Client({
      baseUrl: api.base,
      token,
      retry: false,
      devMode: false,
      enableTelemetry: false,
    });
    await sdk.batch(
      jobs.map((job) => ({
        url: jobUrl(publicUrl, job.subscription),
        body: job.json ?? JSON.stringify(job.body),
        headers: { "Content-Type": "application/json" },
        deduplicationId: job.deduplicationId,
        failureCallback: failureCallbackUrl(publicUrl),
        flowControl: subscriptionFlowControl(publicUrl, job.subscription, 7),
        ...(job.retries === undefined ? {} : { retries: job.retries }),
        label: "edge-outbox-edge-example-com",
      })),
    );
    const publisher = createQStashPublisher({
      baseUrl: api.base,
      token,
      publicUrl,
      deliveryParallelism: 7,
      label: "edge-outbox-edge-example-com",
    });
    const published = await publisher.publish(jobs, new AbortController().signal);

    expect(published).toEqual([0, 1, 2].map((i) => ({ messageId: `msg_${i}`, deduplicated: false })));
    const [bySdk, byPublisher] = api.received;
    expect(byPublisher!.body).toBe(bySdk!.body);
    expect([byPublisher!.method, byPublisher!.path]).toEqual(["POST", "/v2/batch"]);
    for (const name of ["authorization", "content-type", "content-length"]) {
      expect(byPublisher!.headers[name]).toBe(bySdk!.headers[name]);
    }
    // And it says what QStash must hear: per job the destination, the deduplication id,
    // the failure callback, the flow control, the retries when the subscription sets them.
    const [mail] = JSON.parse(byPublisher!.body) as {
      destination: string;
      headers: Record<string, string>;
    }[];
    expect(mail).toMatchObject({
      destination: "https://edge.example.com/app/jobs/notify.mail",
      headers: {
        "upstash-deduplication-id": jobs[0]!.deduplicationId,
        "upstash-failure-callback": "https://edge.example.com/app/jobs/_failed",
        "upstash-flow-control-key": "edge-outbox-jobs-notify.mail-edge.example.com",
        "upstash-flow-control-value": "parallelism=7",
        "upstash-label": "edge-outbox-edge-example-com",
        "upstash-retries": "2",
      },
    });
  });

  it("sends a job's own forwarded headers with it alone, and refuses one no header could carry", async () => {
    const publisher = createQStashPublisher({ baseUrl: api.base, token, publicUrl });
    const signal = new AbortController().signal;
    await publisher.publish([{ ...jobs[0]!, forward: { "Edge-Outbox-Retry-Of": "42" } }, jobs[1]!], signal);
    const sent = JSON.parse(api.received[0]!.body) as { headers: Record<string, string> }[];
    expect(sent[0]!.headers["upstash-forward-edge-outbox-retry-of"]).toBe("42");
    expect(Object.keys(sent[1]!.headers).filter((h) => h.startsWith("upstash-forward-"))).toEqual([]);

    api.reset();
    const bad = publisher.publish(
      [jobs[1]!, { ...jobs[0]!, forward: { "Edge-Outbox-Retry-Of": "4\r\n2" } }],
      signal,
    );
    await expect(bad).rejects.toMatchObject({ name: "PublishError", kind: "rejected" });
    expect(api.received).toEqual([]);
  });

  it("splits a batch where the next message would pass `chunkBytes` (UTF-8) or `chunkSize`, each request valid alone", async () => {
    // Twelve jobs, non-ASCII in their bodies, each message about 480 bytes.
    const many: Job[] = Array.from({ length: 12 }, (_, i) => ({
      ...jobs[i % 3]!,
      deduplicationId: `0190b6d2-7a1e-7cc0-8000-0000000000${String(i).padStart(2, "0")}:notify.mail`,
    }));
    // Each message's id comes back from its own deduplication id, so the order is checked.
    const reset = () => {
      api.reset();
      api.state.respond = (r) => ({
        status: 200,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(
          (JSON.parse(r.body) as { headers: Record<string, string> }[]).map((m) => ({
            messageId: `msg_${m.headers["upstash-deduplication-id"]}`,
          })),
        ),
      });
    };
    reset();
    const whole = createQStashPublisher({ baseUrl: api.base, token, publicUrl });
    await whole.publish(many, new AbortController().signal);
    expect(api.received).toHaveLength(1);
    const all = JSON.parse(api.received[0]!.body) as unknown[];
    const sizes = all.map((m) => Buffer.byteLength(JSON.stringify(m)));

    for (const chunkBytes of [1_300, 2_000, 4_000]) {
      reset();
      const split = createQStashPublisher({
        baseUrl: api.base,
        token,
        publicUrl,
        chunkBytes,
        concurrency: 1,
      });
      const published = await split.publish(many, new AbortController().signal);
      expect(published.map((p) => p.messageId)).toEqual(many.map((j) => `msg_${j.deduplicationId}`));
      const bodies = api.received.map((r) => r.body);
      for (const body of bodies) expect(Buffer.byteLength(body)).toBeLessThanOrEqual(chunkBytes);
      // Together the same messages, in order; and no request could have taken its successor's first.
      expect(bodies.flatMap((b) => JSON.parse(b) as unknown[])).toEqual(all);
      let first = 0;
      for (const body of bodies.slice(0, -1)) {
        first += (JSON.parse(body) as unknown[]).length;
        expect(Buffer.byteLength(body) + 1 + sizes[first]!).toBeGreaterThan(chunkBytes);
      }
    }

    reset();
    const byCount = createQStashPublisher({ baseUrl: api.base, token, publicUrl, chunkSize: 5 });
    await byCount.publish(many, new AbortController().signal);
    expect(api.received.map((r) => (JSON.parse(r.body) as unknown[]).length).sort()).toEqual([2, 5, 5]);
  });

  it("sends a message larger than `chunkBytes` alone rather than refusing it", async () => {
    const publisher = createQStashPublisher({ baseUrl: api.base, token, publicUrl, chunkBytes: 100 });
    const published = await publisher.publish(jobs, new AbortController().signal);
    expect(published).toHaveLength(3);
    expect(api.received.map((r) => (JSON.parse(r.body) as unknown[]).length)).toEqual([1, 1, 1]);
  });

  it("refuses a deduplication id that is no plain header value as the job's own error, sending nothing", async () => {
    const publisher = createQStashPublisher({ baseUrl: api.base, token, publicUrl });
    for (const deduplicationId of ["id:with\nnewline", " leading-space", "non-latin1-€"]) {
      const error = await publisher
        .publish([{ ...jobs[1]!, deduplicationId }], new AbortController().signal)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PublishError);
      expect(error).toMatchObject({ kind: "rejected" });
    }
    expect(api.received).toHaveLength(0);
  });

  it("refuses at start a delivery parallelism the SDK would refuse on every publish", () => {
    for (const deliveryParallelism of [0, -1, 2.5]) {
      expect(() =>
        createQStashPublisher({ baseUrl: api.base, token, publicUrl, deliveryParallelism }),
      ).toThrow(/deliveryParallelism/);
    }
  });

  it("an answer with more or fewer results than messages, or one without an id, fails the publish as an outage", async () => {
    const publisher = createQStashPublisher({ baseUrl: api.base, token, publicUrl });
    for (const answer of [
      [{ messageId: "msg_0" }],
      [{ messageId: "msg_0" }, { messageId: "msg_1" }, { messageId: "msg_2" }],
      [{ messageId: "msg_0" }, { error: "no id" }],
    ]) {
      api.state.respond = () => ({
        status: 200,
        headers: { "content-type": "application/json" },
        body: JSON.stringify(answer),
      });
      await expect(publisher.publish(jobs.slice(0, 2), new AbortController().signal)).rejects.toMatchObject({
        name: "PublishError",
        kind: "outage",
      });
    }
  });
});
