import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import { disableFailingEndpoints } from "../../src/domain/webhooks/auto-disable.ts";
import { deliverWebhook, type DeliverDeps } from "../../src/domain/webhooks/deliver.ts";
import {
  DELIVER_PARALLELISM,
  createQStashDeliverQueue,
  createQStashMessages,
  type DeliverQueue,
} from "../../src/domain/webhooks/deliver-queue.ts";
import { markDeliveryFailed } from "../../src/domain/webhooks/delivery-failed.ts";
import { fanOutWebhook } from "../../src/domain/webhooks/fanout.ts";
import { endpointHealth, healthLabel } from "../../src/domain/webhooks/delivery-log.ts";
import { getEndpoint } from "../../src/domain/webhooks/get.ts";
import {
  FAILING_ALERT_AFTER_MINUTES,
  LAG_ALERT_AFTER_MINUTES,
  evaluateEndpointLag,
  evaluateFailingEndpoints,
} from "../../src/domain/webhooks/lag.ts";
import { raisedAgainNote } from "../../src/domain/alert-kinds.ts";
import type { WebhookEvent } from "../../src/domain/webhooks/payload.ts";
import { recoverDeliveries } from "../../src/domain/webhooks/recover.ts";
import { redeliver } from "../../src/domain/webhooks/redeliver.ts";
import { removeEndpoint } from "../../src/domain/webhooks/remove.ts";
import { updateEndpoint } from "../../src/domain/webhooks/update.ts";
import { sendTestEvent } from "../../src/domain/webhooks/send-test.ts";
import {
  OVERDUE_AFTER_MINUTES,
  UNPUBLISHED_AFTER_MINUTES,
  deleteOldDeliveries,
  publishOverdue,
  publishUnpublished,
} from "../../src/domain/webhooks/sweep.ts";
import { importSecretsKey, newSecretsKey } from "../../src/domain/webhooks/secret-box.ts";
import { newSecret } from "../../src/domain/webhooks/signing.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";
import { freePort } from "../../src/node/postgres.ts";
import { startReceiver } from "../qstash-dev/receiver.ts";
import { untilALockWait } from "../support/helpers.ts";
import { useTestDatabase } from "../support/db.ts";
import { insertEndpoint, useSecretsKey, verifyWebhook } from "../support/webhooks.ts";

// Fan-out, delivery and the operator verbs as use cases: real Postgres, the
// QStash dev server for publishing, a receiver this file controls. QStash's
// delivery of the jobs themselves is covered in test/worker/workerd-webhooks.test.ts.

/** What a delivery-failure alert ends with: what answers it. */
const RECOVER =
  ". Once the endpoint answers, Recover on its page (webhooks recover) sends the failed ones again";

const t = useTestDatabase();
const secrets = useSecretsKey();
let qstash: QStashDev;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let queue: DeliverQueue;
const SCHEDULE = [5, 300, 1800];

beforeAll(async () => {
  qstash = await startQStashDev({ log: () => undefined });
  // Jobs are only published here, never delivered: the Worker is not running in this file.
  qstash.pauseDelivery();
  receiver = await startReceiver();
  queue = createQStashDeliverQueue({
    baseUrl: qstash.url,
    token: qstash.token,
    publicUrl: "http://127.0.0.1:9",
    retries: SCHEDULE.length,
  });
});
afterAll(async () => {
  await Promise.all([qstash?.close(), receiver?.close()]);
});
beforeEach(() => {
  receiver.reset();
});

const db = () => t.db as unknown as Db;
const deps = async (overrides: Partial<DeliverDeps> = {}): Promise<DeliverDeps> => ({
  db: db(),
  secretsKey: await secrets.key,
  schedule: SCHEDULE,
  // The receivers here are http on 127.0.0.1, as under `npm run dev`.
  urlPolicy: { allowPrivate: true },
  ...overrides,
});

function event(overrides: Partial<WebhookEvent> = {}): WebhookEvent {
  return {
    id: crypto.randomUUID(),
    type: "corpus.note.updated",
    subject: crypto.randomUUID(),
    scope: null,
    payload: { title: "hello" },
    createdAt: new Date().toISOString(),
    ...overrides,
  };
}

async function deliveriesOf(eventId: string) {
  const { rows } = await t.pool.query(
    "SELECT id, endpoint_id, status, message_id, attempts, body, last_error FROM webhook_deliveries WHERE event_id = $1 ORDER BY endpoint_id",
    [eventId],
  );
  return rows;
}

async function attemptsOf(deliveryId: string) {
  const { rows } = await t.pool.query(
    "SELECT status, error, duration_ms, response_headers, response_body FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id",
    [deliveryId],
  );
  return rows;
}

const publishedFor = (deliveryId: string) =>
  qstash.messages().filter((m) => m.kind !== "failure-callback" && m.body.includes(deliveryId));

/** A QStash that cannot be reached: every publish fails. */
const down: DeliverQueue = { enqueue: () => Promise.reject(new Error("QStash unreachable")) };

/**
 * An event of a fresh scope fanned out to one endpoint per path while QStash is
 * down: its delivery rows are committed, pending, without a job (ordered by endpoint).
 */
async function lostDeliveries(name: string, paths: string[]) {
  const scope = `${name}-${crypto.randomUUID()}`;
  for (const path of paths) await insertEndpoint(t.pool, secrets.key, { url: receiver.url(path), scope });
  const e = event({ scope });
  await expect(fanOutWebhook(db(), down, e)).rejects.toThrow("QStash unreachable");
  return { event: e, rows: await deliveriesOf(e.id) };
}

describe("fan-out", () => {
  it("makes one delivery per enabled endpoint of the event's scope whose globs match, and one job each", async () => {
    const scope = `s-${crypto.randomUUID()}`;
    const all = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/all"), scope });
    const notes = await insertEndpoint(t.pool, secrets.key, {
      url: receiver.url("/notes"),
      scope,
      types: ["suppliers.*", "corpus.note.*"],
    });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/other"), scope, types: ["supplier.*"] });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/off"), scope, enabled: false });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/elsewhere"), scope: `${scope}-2` });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/unscoped"), scope: null });

    const e = event({ scope });
    expect(await fanOutWebhook(db(), queue, e)).toEqual({ matched: 2, created: 2, published: 2 });
    const rows = await deliveriesOf(e.id);
    expect(rows.map((r) => r.endpoint_id).sort()).toEqual([all.id, notes.id].sort());
    for (const row of rows) {
      expect(row).toMatchObject({ status: "pending", message_id: expect.stringMatching(/^msg_/) });
      expect(JSON.parse(row.body)).toEqual({
        type: e.type,
        timestamp: e.createdAt,
        data: { id: e.id, subject: e.subject, scope, payload: e.payload },
      });
      const [message] = publishedFor(row.id);
      expect(message).toMatchObject({ messageId: row.message_id, maxRetries: SCHEDULE.length });
      expect(message!.url).toBe("http://127.0.0.1:9/jobs/webhook.deliver");
      expect(JSON.parse(message!.body)).toEqual({ deliveryId: row.id });
      const view = await fetch(`${qstash.url}/v2/messages/${row.message_id}`, {
        headers: { authorization: `Bearer ${qstash.token}` },
      }).then((r) => r.json() as Promise<{ failureCallback?: string }>);
      expect(view.failureCallback).toBe("http://127.0.0.1:9/jobs/_failed");
    }
  });

  it("a null scope matches only endpoints without a scope", async () => {
    const unscoped = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/n"), scope: null });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/s"), scope: "tenant-x" });
    const e = event({ scope: null });
    await fanOutWebhook(db(), queue, e);
    const ids = (await deliveriesOf(e.id)).map((r) => r.endpoint_id);
    expect(ids).toContain(unscoped.id);
    const { rows } = await t.pool.query(
      "SELECT count(*)::int AS n FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.event_id = $1 AND e.scope IS NOT NULL",
      [e.id],
    );
    expect(rows[0].n).toBe(0);
  });

  it("a replayed fan-out creates no second row and QStash accepts no second job", async () => {
    const scope = `replay-${crypto.randomUUID()}`;
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/r1"), scope });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/r2"), scope });
    const e = event({ scope });
    await fanOutWebhook(db(), queue, e);
    const first = await deliveriesOf(e.id);

    // The job is delivered again (our 200 was lost), and again with the rows' message ids lost
    // (a crash after the publish, before recording): nothing new either way.
    expect(await fanOutWebhook(db(), queue, e)).toEqual({ matched: 2, created: 0, published: 0 });
    await t.pool.query("UPDATE webhook_deliveries SET message_id = NULL WHERE event_id = $1", [e.id]);
    expect(await fanOutWebhook(db(), queue, e)).toMatchObject({ created: 0, published: 2 });

    const again = await deliveriesOf(e.id);
    expect(again.map((r) => r.id)).toEqual(first.map((r) => r.id));
    expect(again.map((r) => r.message_id)).toEqual(first.map((r) => r.message_id));
    for (const row of first) expect(publishedFor(row.id)).toHaveLength(1);
  });

  it("each endpoint's deliver jobs have a flow-control budget of their own, apart from the subscribers' and other endpoints'", async () => {
    const scope = `budget-${crypto.randomUUID()}`;
    const one = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/budget-1"), scope });
    const two = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/budget-2"), scope });
    const events = [event({ scope }), event({ scope })];
    for (const e of events) await fanOutWebhook(db(), queue, e);
    for (const endpoint of [one, two]) {
      for (const e of events) {
        const delivery = (await deliveriesOf(e.id)).find((d) => d.endpoint_id === endpoint.id);
        const [job] = publishedFor(delivery.id);
        expect(job?.flowControlKey).toBe(`edge-outbox-webhooks-${endpoint.id}-127.0.0.1_9`);
        // As QStash reports the message: the parallelism it will hold deliveries to.
        const res = await fetch(`${qstash.url}/v2/messages/${job!.messageId}`, {
          headers: { authorization: `Bearer ${qstash.token}` },
        });
        expect(await res.json()).toMatchObject({ parallelism: DELIVER_PARALLELISM });
      }
    }
    // A redelivery and a test event keep their endpoint's budget.
    const [first] = await deliveriesOf(events[0]!.id);
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      first.id,
    ]);
    await redeliver(db(), queue, first.id);
    const sent = await sendTestEvent(db(), queue, two.id);
    expect(publishedFor(first.id).map((m) => m.flowControlKey)).toEqual([
      `edge-outbox-webhooks-${first.endpoint_id}-127.0.0.1_9`,
      `edge-outbox-webhooks-${first.endpoint_id}-127.0.0.1_9`,
    ]);
    expect(publishedFor(sent.deliveryId).map((m) => m.flowControlKey)).toEqual([
      `edge-outbox-webhooks-${two.id}-127.0.0.1_9`,
    ]);
  });

  it("a crash between the insert and the publish is repaired by the replay", async () => {
    const {
      event: e,
      rows: [orphan],
    } = await lostDeliveries("crash", ["/c"]);
    expect(orphan).toMatchObject({ status: "pending", message_id: null });
    expect(publishedFor(orphan.id)).toHaveLength(0);

    expect(await fanOutWebhook(db(), queue, e)).toEqual({ matched: 1, created: 0, published: 1 });
    const [published] = await deliveriesOf(e.id);
    expect(published.id).toBe(orphan.id);
    expect(publishedFor(orphan.id)).toEqual([expect.objectContaining({ messageId: published.message_id })]);
  });
});

/** One endpoint and one fanned-out delivery for it. */
async function oneDelivery(path: string, fixture: { scope?: string | null; previousSecret?: string } = {}) {
  const scope = fixture.scope === undefined ? `d-${crypto.randomUUID()}` : fixture.scope;
  const endpoint = await insertEndpoint(t.pool, secrets.key, {
    url: receiver.url(path),
    scope,
    ...(fixture.previousSecret
      ? { previousSecret: fixture.previousSecret, previousExpiresAt: new Date(Date.now() + 3_600_000) }
      : {}),
  });
  const e = event({ scope });
  await fanOutWebhook(db(), queue, e);
  const [delivery] = await deliveriesOf(e.id);
  return { endpoint, event: e, delivery: delivery as { id: string; body: string; message_id: string } };
}

describe("deliver", () => {
  it("POSTs the stored body signed per Standard Webhooks, records the attempt and the endpoint's success", async () => {
    const previous = newSecret();
    const { endpoint, event: e, delivery } = await oneDelivery("/ok", { previousSecret: previous });
    receiver.state.respond = () => ({ status: 204, headers: { "x-request-id": "rcv-1" } });

    expect(await deliverWebhook(await deps(), delivery.id, 0)).toEqual({ kind: "delivered", status: 204 });
    const [req] = receiver.received.filter((r) => r.path === "/ok");
    expect(req!.body).toBe(delivery.body);
    expect(req!.headers["content-type"]).toBe("application/json");
    expect(req!.headers["webhook-id"]).toBe(e.id);
    expect(Number(req!.headers["webhook-timestamp"])).toBeCloseTo(Date.now() / 1000, -1);
    // Both secrets verify during the rotation, each on its own, with the independent package.
    expect(verifyWebhook(endpoint.secret, req!.body, req!.headers)).toMatchObject({ type: e.type });
    expect(() => verifyWebhook(previous, req!.body, req!.headers)).not.toThrow();
    expect(() => verifyWebhook(newSecret(), req!.body, req!.headers)).toThrow();

    const [row] = await deliveriesOf(e.id);
    expect(row).toMatchObject({ status: "delivered", attempts: 1, last_error: null });
    expect(await attemptsOf(delivery.id)).toEqual([
      expect.objectContaining({ status: 204, error: null, response_headers: { "x-request-id": "rcv-1" } }),
    ]);
    const { rows } = await t.pool.query(
      "SELECT last_success_at, failing_since FROM webhook_endpoints WHERE id = $1",
      [endpoint.id],
    );
    expect(rows[0]).toMatchObject({ last_success_at: expect.any(Date), failing_since: null });

    // QStash delivers the job again: answered without a POST.
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toEqual({
      kind: "settled",
      status: "delivered",
    });
    expect(receiver.received.filter((r) => r.path === "/ok")).toHaveLength(1);
  });

  it("QStash's retries of a job send the same webhook-id, signed afresh, so a receiver can drop repeats", async () => {
    const { endpoint, event: e, delivery } = await oneDelivery("/retried");
    const answers = [503, 503, 200];
    receiver.state.respond = () => ({ status: answers.shift() ?? 500 });
    // `retried` is QStash's count of earlier deliveries of this job: 0, then 1, then 2.
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "retry" });
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toMatchObject({ kind: "retry" });
    expect(await deliverWebhook(await deps(), delivery.id, 2)).toEqual({ kind: "delivered", status: 200 });
    const posts = receiver.received.filter((r) => r.path === "/retried");
    expect(posts.map((p) => p.headers["webhook-id"])).toEqual([e.id, e.id, e.id]);
    // Each verifies with the independent package, the id being part of what is signed.
    for (const p of posts) {
      expect(verifyWebhook(endpoint.secret, p.body, p.headers)).toMatchObject({ data: { id: e.id } });
    }
  });

  it("a lease whose attempt died mid-flight has expired: the next delivery takes it and POSTs once", async () => {
    const { delivery, event: e } = await oneDelivery("/lease-lapsed");
    // As a Worker killed during its POST leaves the row: leased, counted, never recorded;
    // its lease ran out a second ago.
    await t.pool.query(
      `UPDATE webhook_deliveries
          SET lease_until = now() - interval '1 second', attempts = 1, last_attempt_at = now() - interval '61 seconds'
        WHERE id = $1`,
      [delivery.id],
    );
    receiver.state.respond = () => ({ status: 200 });
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toEqual({ kind: "delivered", status: 200 });
    expect(receiver.received.filter((r) => r.path === "/lease-lapsed")).toHaveLength(1);
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "delivered", attempts: 2 });
  });

  it("the job's next attempt takes over a lease its killed earlier attempt holds; one attempt sent twice still waits", async () => {
    const { delivery, event: e } = await oneDelivery("/lease-taken-over");
    // As a Worker killed during attempt 0's POST leaves the row: leased for most of a
    // minute more, counted, never recorded.
    await t.pool.query(
      `UPDATE webhook_deliveries SET lease_until = now() + interval '50 seconds', lease_retried = 0, attempts = 1
        WHERE id = $1`,
      [delivery.id],
    );
    receiver.state.respond = () => ({ status: 200 });
    // A second copy of attempt 0 (QStash delivers at least once) may be running beside it: it waits.
    expect(await deliverWebhook(await deps(), delivery.id, 0, delivery.message_id)).toMatchObject({
      kind: "busy",
    });
    // Attempt 1 of the job comes only once attempt 0 is over. It was answered 409 until
    // the lease ran out, each answer one of the job's retries spent (all of them, within
    // seconds, under the dev server's time scale).
    expect(await deliverWebhook(await deps(), delivery.id, 1, delivery.message_id)).toEqual({
      kind: "delivered",
      status: 200,
    });
    expect(receiver.received.filter((r) => r.path === "/lease-taken-over")).toHaveLength(1);
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "delivered", attempts: 2 });
  });

  it("two concurrent deliveries of one job make one POST; the other is told to come back", async () => {
    const { delivery } = await oneDelivery("/race");
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    receiver.state.respond = async () => {
      await held;
      return { status: 200 };
    };
    // Two connections of their own, as two Worker invocations would have.
    const [a, b] = [t.newPool(1), t.newPool(1)];
    const first = deliverWebhook(await deps({ db: drizzle(a) as unknown as Db }), delivery.id, 0);
    await receiver.waitForRequests(1, "/race");
    const second = await deliverWebhook(await deps({ db: drizzle(b) as unknown as Db }), delivery.id, 0);
    expect(second).toMatchObject({ kind: "busy", retryAfterSeconds: expect.any(Number) });
    expect((second as { retryAfterSeconds: number }).retryAfterSeconds).toBeGreaterThan(0);
    release();
    expect(await first).toEqual({ kind: "delivered", status: 200 });
    expect(receiver.received.filter((r) => r.path === "/race")).toHaveLength(1);
  });

  it("two deliveries racing for the lease from the start still make one POST", async () => {
    const { delivery } = await oneDelivery("/race2");
    const outcomes = await Promise.all(
      [t.newPool(1), t.newPool(1)].map(async (p) =>
        deliverWebhook(await deps({ db: drizzle(p) as unknown as Db }), delivery.id, 0),
      ),
    );
    // The loser either found the lease held or, if it came second, the row delivered.
    expect(outcomes.filter((o) => o.kind === "delivered")).toHaveLength(1);
    expect(outcomes.filter((o) => o.kind !== "delivered")).toEqual([
      expect.objectContaining({ kind: expect.stringMatching(/^(busy|settled)$/) }),
    ]);
    expect(receiver.received.filter((r) => r.path === "/race2")).toHaveLength(1);
  });

  it("a 5xx is retried after the schedule's delay; a longer Retry-After from the receiver wins", async () => {
    const { delivery } = await oneDelivery("/flaky");
    receiver.state.respond = () => ({ status: 503, body: "down for maintenance" });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toEqual({
      kind: "retry",
      reason: "endpoint answered 503",
      retryAfterSeconds: 5,
    });
    receiver.state.respond = () => ({ status: 429, headers: { "retry-after": "120" } });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ retryAfterSeconds: 120 });
    // A shorter one does not shorten the schedule.
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toMatchObject({ retryAfterSeconds: 300 });
    const inAnHour = new Date(Date.now() + 3_600_000).toUTCString();
    receiver.state.respond = () => ({ status: 503, headers: { "retry-after": inAnHour } });
    const dated = await deliverWebhook(await deps(), delivery.id, 0);
    expect((dated as { retryAfterSeconds: number }).retryAfterSeconds).toBeGreaterThanOrEqual(3598);
    expect((dated as { retryAfterSeconds: number }).retryAfterSeconds).toBeLessThanOrEqual(3601);
    // The schedule spent: QStash will not come back.
    expect(await deliverWebhook(await deps(), delivery.id, SCHEDULE.length)).toMatchObject({
      kind: "retry",
      retryAfterSeconds: null,
    });

    const attempts = await attemptsOf(delivery.id);
    expect(attempts).toHaveLength(5);
    expect(attempts[0]).toMatchObject({ status: 503, error: null, response_body: "down for maintenance" });
    expect(attempts[1].response_headers).toEqual({ "retry-after": "120" });
    const { rows } = await t.pool.query(
      "SELECT e.failing_since, d.status, d.attempts FROM webhook_endpoints e JOIN webhook_deliveries d ON d.endpoint_id = e.id WHERE d.id = $1",
      [delivery.id],
    );
    expect(rows[0]).toMatchObject({ failing_since: expect.any(Date), status: "pending", attempts: 5 });
  });

  it("other 4xx retry, a redirect is not followed, and the attempt keeps only 2 KB of the body", async () => {
    const { delivery } = await oneDelivery("/moved");
    receiver.state.respond = () => ({ status: 302, headers: { location: receiver.url("/elsewhere") } });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({
      kind: "retry",
      reason: "endpoint answered 302",
    });
    expect(receiver.received.filter((r) => r.path === "/elsewhere")).toHaveLength(0);
    receiver.state.respond = () => ({ status: 400, body: "x".repeat(10_000) });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({
      kind: "retry",
      reason: "endpoint answered 400",
    });
    const [redirect, bad] = await attemptsOf(delivery.id);
    expect(redirect.response_headers).toMatchObject({ location: receiver.url("/elsewhere") });
    expect(bad.response_body).toHaveLength(2048);
  });

  it("classifies attempts that got no answer: refused and timeout", async () => {
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const port = (silent.address() as AddressInfo).port;
    try {
      const scope = `noanswer-${crypto.randomUUID()}`;
      const hang = await insertEndpoint(t.pool, secrets.key, { url: `http://127.0.0.1:${port}/hang`, scope });
      const refused = await insertEndpoint(t.pool, secrets.key, {
        url: `http://127.0.0.1:${await freePort()}/refused`,
        scope,
      });
      const e = event({ scope });
      await fanOutWebhook(db(), queue, e);
      const rows = await deliveriesOf(e.id);
      const byEndpoint = (id: string) => rows.find((r) => r.endpoint_id === id)!.id as string;

      const timedOut = await deliverWebhook(await deps({ timeoutMs: 800 }), byEndpoint(hang.id), 0);
      expect(timedOut).toMatchObject({ kind: "retry", reason: "no answer: timeout" });
      const noListener = await deliverWebhook(await deps(), byEndpoint(refused.id), 0);
      expect(noListener).toMatchObject({ kind: "retry", reason: "no answer: refused" });
      expect(await attemptsOf(byEndpoint(hang.id))).toEqual([
        expect.objectContaining({ status: null, error: "timeout", duration_ms: expect.any(Number) }),
      ]);
      expect((await attemptsOf(byEndpoint(refused.id)))[0]).toMatchObject({ status: null, error: "refused" });
      // The attempt is dated when its POST went out (the delivery's last attempt), not when it timed out.
      const { rows: times } = await t.pool.query<{ duration_ms: number; gap_ms: number }>(
        `SELECT a.duration_ms, abs(extract(epoch FROM a.attempted_at - d.last_attempt_at) * 1000)::float8 AS gap_ms
           FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.id = $1`,
        [byEndpoint(hang.id)],
      );
      expect(times[0]!.duration_ms).toBeGreaterThanOrEqual(750);
      // Exactly: a client compares the delivery's lastAttemptAt with its last attempt's attemptedAt.
      expect(times[0]!.gap_ms).toBe(0);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });

  it("a secret that does not open fails the job without a POST and gives the lease back", async () => {
    const { delivery } = await oneDelivery("/wrong-key");
    const otherKey = await importSecretsKey(newSecretsKey());
    await expect(deliverWebhook(await deps({ secretsKey: otherKey }), delivery.id, 0)).rejects.toThrow(
      "does not open",
    );
    expect(receiver.received.filter((r) => r.path === "/wrong-key")).toHaveLength(0);
    const { rows } = await t.pool.query(
      "SELECT lease_until, last_error, status FROM webhook_deliveries WHERE id = $1",
      [delivery.id],
    );
    expect(rows[0]).toMatchObject({
      lease_until: null,
      status: "pending",
      last_error: expect.stringContaining("does not open"),
    });
    // The next delivery of the job, with the right key, goes straight through.
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toMatchObject({ kind: "delivered" });
  });

  it("records an answer whose body holds a NUL, which Postgres text cannot: delivered once, not resent", async () => {
    const { delivery, event: e } = await oneDelivery("/nul");
    receiver.state.respond = () => ({ status: 200, body: "ok\u0000done" });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "delivered" });
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "delivered" });
    expect(await attemptsOf(delivery.id)).toEqual([
      expect.objectContaining({ status: 200, response_body: "ok\uFFFDdone" }),
    ]);

    const failing = await oneDelivery("/nul-503");
    receiver.state.respond = () => ({ status: 503, body: "\u0000".repeat(10) });
    expect(await deliverWebhook(await deps(), failing.delivery.id, 0)).toMatchObject({ kind: "retry" });
    expect(await attemptsOf(failing.delivery.id)).toEqual([
      expect.objectContaining({ status: 503, response_body: "\uFFFD".repeat(10) }),
    ]);
  });

  it("410 Gone disables the endpoint with the reason and an alert; its later events are not delivered", async () => {
    const { endpoint, delivery, event: e } = await oneDelivery("/gone");
    receiver.state.respond = () => ({ status: 410 });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toEqual({ kind: "gone" });
    const { rows } = await t.pool.query(
      "SELECT enabled, disabled_reason, disabled_at FROM webhook_endpoints WHERE id = $1",
      [endpoint.id],
    );
    expect(rows[0]).toMatchObject({ enabled: false, disabled_reason: "endpoint answered 410 Gone" });
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "failed" });
    const alerts = await t.pool.query(
      "SELECT kind, message, details FROM outbox_alerts WHERE kind = 'webhook.endpoint_disabled' AND details->>'endpointId' = $1",
      [endpoint.id],
    );
    expect(alerts.rows).toHaveLength(1);
    // Which endpoint, and what to do: it said only "<id> disabled: <reason>".
    expect(alerts.rows[0].message).toBe(
      `webhook endpoint ${endpoint.id} (${receiver.url("/gone")}) disabled: endpoint answered 410 Gone; events recorded ` +
        "while it is disabled make no delivery for it. Enable it, then recover its failed deliveries",
    );

    const later = event({ scope: e.scope });
    expect(await fanOutWebhook(db(), queue, later)).toMatchObject({ matched: 0, created: 0 });
    // A job already in flight for it finds the endpoint disabled and sends nothing.
    const before = receiver.received.length;
    await t.pool.query("UPDATE webhook_deliveries SET status = 'pending' WHERE id = $1", [delivery.id]);
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toEqual({ kind: "endpoint_disabled" });
    expect(receiver.received.length).toBe(before);
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "failed" });
  });
});

describe("an endpoint whose URL today's rules refuse", () => {
  it("gets no POST: the delivery fails and the endpoint is disabled naming the rule, with an alert", async () => {
    // Saved while private URLs were allowed (a local stack), delivered once they are not.
    const { endpoint, delivery, event: e } = await oneDelivery("/was-allowed");
    const before = receiver.received.length;
    const outcome = await deliverWebhook(await deps({ urlPolicy: { allowPrivate: false } }), delivery.id, 0);
    expect(outcome).toEqual({
      kind: "url_refused",
      reason: "url refused: must use https (http is allowed only with WEBHOOK_ALLOW_PRIVATE_URLS=true)",
    });
    expect(receiver.received.length).toBe(before);
    expect(await attemptsOf(delivery.id)).toEqual([]);
    expect((await deliveriesOf(e.id))[0]).toMatchObject({
      status: "failed",
      last_error: outcome.kind === "url_refused" ? outcome.reason : "",
    });
    const { rows } = await t.pool.query(
      "SELECT enabled, disabled_reason FROM webhook_endpoints WHERE id = $1",
      [endpoint.id],
    );
    expect(rows[0]).toEqual({
      enabled: false,
      disabled_reason: expect.stringMatching(/^url refused: must use https/),
    });
    const alerts = await t.pool.query(
      "SELECT details->>'reason' AS reason FROM outbox_alerts WHERE kind = 'webhook.endpoint_disabled' AND details->>'endpointId' = $1",
      [endpoint.id],
    );
    expect(alerts.rows).toEqual([{ reason: expect.stringMatching(/^url refused: must use https/) }]);
  });
});

describe("the attempt log after an endpoint's URL changes", () => {
  it("records where each attempt was POSTed", async () => {
    const { endpoint, delivery } = await oneDelivery("/moved-from");
    receiver.state.respond = (r) => (r.path === "/moved-from" ? { status: 500 } : { status: 200 });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "retry" });
    await updateEndpoint(db(), endpoint.id, { url: receiver.url("/moved-to") }, { allowPrivate: true });
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toMatchObject({ kind: "delivered" });

    const { rows } = await t.pool.query(
      "SELECT url, status FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id",
      [delivery.id],
    );
    expect(rows).toEqual([
      { url: receiver.url("/moved-from"), status: 500 },
      { url: receiver.url("/moved-to"), status: 200 },
    ]);
  });
});

describe("when QStash gives up", () => {
  it("the failure callback fails the delivery with an alert, once, and only for the job that carries it", async () => {
    const { delivery, event: e } = await oneDelivery("/never");
    const failure = { deliveryId: delivery.id, status: 503, retried: 3, dlqId: "dlq-1" };
    expect(await markDeliveryFailed(db(), { ...failure, messageId: "msg_replaced_by_a_redelivery" })).toEqual(
      {
        failed: false,
      },
    );
    expect(await markDeliveryFailed(db(), { ...failure, messageId: delivery.message_id })).toEqual({
      failed: true,
    });
    expect(await markDeliveryFailed(db(), { ...failure, messageId: delivery.message_id })).toEqual({
      failed: false,
    });
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "failed" });
    const { rows } = await t.pool.query(
      "SELECT event_id, details FROM outbox_alerts WHERE kind = 'webhook.delivery_failed' AND details->>'deliveryId' = $1",
      [delivery.id],
    );
    expect(rows).toEqual([
      expect.objectContaining({
        event_id: e.id,
        // The deliver route's answer to QStash, named so it is not read as the receiver's.
        details: expect.objectContaining({ dlqId: "dlq-1", jobStatus: 503 }),
      }),
    ]);
  });
});

describe("one open delivery_failed alert per endpoint (ADR 0031)", () => {
  /** An endpoint with `n` deliveries QStash has jobs for, none failed yet. */
  async function pendingDeliveries(path: string, n: number) {
    const scope = `fold-${crypto.randomUUID()}`;
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: receiver.url(path), scope });
    const deliveries: { id: string; message_id: string }[] = [];
    for (let i = 0; i < n; i++) {
      const e = event({ scope });
      await fanOutWebhook(db(), queue, e);
      deliveries.push((await deliveriesOf(e.id))[0] as { id: string; message_id: string });
    }
    return { endpoint, deliveries };
  }
  const giveUp = (d: { id: string; message_id: string }, on: Db = db()) =>
    markDeliveryFailed(on, {
      deliveryId: d.id,
      messageId: d.message_id,
      status: 503,
      retried: 3,
      dlqId: null,
    });
  async function alertsOf(endpointId: string) {
    const { rows } = await t.pool.query(
      `SELECT id::int, resolved_at IS NULL AS open, (details->>'count')::int AS count,
              details->>'deliveryId' AS "deliveryId", message
         FROM outbox_alerts WHERE kind = 'webhook.delivery_failed' AND details->>'endpointId' = $1 ORDER BY id`,
      [endpointId],
    );
    return rows as { id: number; open: boolean; count: number; deliveryId: string; message: string }[];
  }

  it("an endpoint that fails every delivery has one open alert counting them; another endpoint has its own", async () => {
    const down = await pendingDeliveries("/fold-down", 5);
    const other = await pendingDeliveries("/fold-other", 1);
    for (const d of down.deliveries) expect(await giveUp(d)).toEqual({ failed: true });
    // One attempt is "1 attempt", not "1 attempts".
    await t.pool.query("UPDATE webhook_deliveries SET attempts = 1 WHERE id = $1", [other.deliveries[0]!.id]);
    await giveUp(other.deliveries[0]!);
    // A repeated callback changes nothing, the count included.
    expect(await giveUp(down.deliveries[4]!)).toEqual({ failed: false });

    const [alert, ...more] = await alertsOf(down.endpoint.id);
    expect(more).toEqual([]);
    expect(alert).toMatchObject({ open: true, count: 5, deliveryId: down.deliveries[4]!.id });
    expect(alert!.message).toBe(
      `5 delivery failures at webhook endpoint ${down.endpoint.id} (${receiver.url("/fold-down")}); ` +
        `the latest: delivery ${down.deliveries[4]!.id}, after 0 attempts: retries exhausted` +
        RECOVER,
    );
    expect(await alertsOf(other.endpoint.id)).toEqual([
      expect.objectContaining({
        open: true,
        count: 1,
        message:
          `1 delivery failure at webhook endpoint ${other.endpoint.id} (${receiver.url("/fold-other")}): ` +
          `delivery ${other.deliveries[0]!.id}, after 1 attempt: retries exhausted` +
          RECOVER,
      }),
    ]);
    // Folding takes no id: the other endpoint's alert, raised after all five, is the next one.
    expect((await alertsOf(other.endpoint.id))[0]!.id).toBe(alert!.id + 1);
  });

  it("failures arriving together on separate connections fold into one alert with every one counted", async () => {
    const { endpoint, deliveries } = await pendingDeliveries("/fold-race", 16);
    // Each callback on a connection of its own, all at once: whichever inserts
    // first raises the alert, the others must find it and add to it.
    const pools = deliveries.map(() => t.newPool(1));
    const results = await Promise.all(
      deliveries.map((d, i) => giveUp(d, drizzle(pools[i]!) as unknown as Db)),
    );
    await Promise.all(pools.map((p) => p.end()));
    expect(results.every((r) => r.failed)).toBe(true);
    expect(await alertsOf(endpoint.id)).toEqual([expect.objectContaining({ open: true, count: 16 })]);
  });

  it("a resend resolves the alert only when none of the failures it counts is left failed", async () => {
    const { endpoint, deliveries } = await pendingDeliveries("/fold-resend", 3);
    for (const d of deliveries) await giveUp(d);
    const [first] = await alertsOf(endpoint.id);

    // One of three re-sent: two still failed, the alert stays open.
    await redeliver(db(), queue, deliveries[0]!.id);
    expect(await alertsOf(endpoint.id)).toEqual([expect.objectContaining({ id: first!.id, open: true })]);
    // The rest re-sent: answered.
    expect(await recoverDeliveries(db(), queue, endpoint.id, new Date(0))).toEqual({
      recovered: 2,
      retrying: 0,
      more: false,
    });
    expect(await alertsOf(endpoint.id)).toEqual([expect.objectContaining({ id: first!.id, open: false })]);
    expect((await alertsOf(endpoint.id))[0]!.message).toMatch(
      /^3 delivery failures at .* sends the failed ones again; resolved: every delivery it counted was sent again$/,
    );

    // A resend that fails for good again raises a new alert; the resolved one stays resolved.
    const { rows } = await t.pool.query("SELECT message_id FROM webhook_deliveries WHERE id = $1", [
      deliveries[1]!.id,
    ]);
    await giveUp({ id: deliveries[1]!.id, message_id: rows[0].message_id });
    const after = await alertsOf(endpoint.id);
    expect(after).toEqual([
      expect.objectContaining({ id: first!.id, open: false, count: 3 }),
      expect.objectContaining({ open: true, count: 1, deliveryId: deliveries[1]!.id }),
    ]);
  });

  it("a failure that joins the alert while a resend resolves it keeps it open", async () => {
    const { endpoint, deliveries } = await pendingDeliveries("/fold-interleaved", 2);
    await giveUp(deliveries[0]!);
    // The second failure's statement runs in a transaction held open on its own
    // connection: it has folded into the alert (and holds its row) but not committed.
    const held = await t.pool.connect();
    try {
      await held.query("BEGIN");
      await giveUp(deliveries[1]!, drizzle(held) as unknown as Db);
      // The resend of the first waits for the alert's row...
      const resend = redeliver(db(), queue, deliveries[0]!.id);
      await untilALockWait(t.pool);
      await held.query("COMMIT");
      await resend;
    } finally {
      held.release();
    }
    // ...and then sees the second failure, committed meanwhile: still to be answered.
    expect(await alertsOf(endpoint.id)).toEqual([expect.objectContaining({ open: true, count: 2 })]);
  });
});

describe("an endpoint that does not keep up (the sweep's lag check)", () => {
  /** An endpoint with `n` deliveries that have waited `minutes` for their first attempt. */
  async function waiting(path: string, n: number, minutes: number, fixture: { enabled?: boolean } = {}) {
    const scope = `lag-${crypto.randomUUID()}`;
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: receiver.url(path), scope });
    for (let i = 0; i < n; i++) await fanOutWebhook(db(), queue, event({ scope }));
    await t.pool.query(
      "UPDATE webhook_deliveries SET created_at = now() - make_interval(mins => $2) WHERE endpoint_id = $1",
      [endpoint.id, minutes],
    );
    if (fixture.enabled === false) {
      await t.pool.query(
        "UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'by hand' WHERE id = $1",
        [endpoint.id],
      );
    }
    return { ...endpoint, scope };
  }
  async function lagAlerts(endpointId: string) {
    const { rows } = await t.pool.query(
      `SELECT id::int, resolved_at IS NULL AS open, (details->>'waiting')::int AS waiting, message,
              details->>'oldestWaitingSince' AS "oldestWaitingSince", details->>'checkedAt' AS "checkedAt"
         FROM outbox_alerts WHERE kind = 'webhook.endpoint_lagging' AND details->>'endpointId' = $1 ORDER BY id`,
      [endpointId],
    );
    return rows as { id: number; open: boolean; waiting: number; message: string }[];
  }
  const check = (on: Db = db()) => evaluateEndpointLag(on, { now: new Date() });

  it("raises one alert for an endpoint whose deliveries wait past the threshold, and keeps its count current", async () => {
    const slow = await waiting("/lag-slow", 3, LAG_ALERT_AFTER_MINUTES + 5);
    const fresh = await waiting("/lag-fresh", 3, LAG_ALERT_AFTER_MINUTES - 5);
    const off = await waiting("/lag-off", 3, LAG_ALERT_AFTER_MINUTES + 5, { enabled: false });

    const first = await check();
    expect(first.raised).toContain(slow.id);
    expect(first.count).toBeGreaterThanOrEqual(1);
    const [alert] = await lagAlerts(slow.id);
    expect(alert).toEqual({
      id: expect.any(Number),
      open: true,
      waiting: 3,
      // Named by URL too, and as of when it was looked at: it reads true after it is resolved.
      message: expect.stringMatching(
        new RegExp(
          `^webhook endpoint ${slow.id} \\(${receiver.url("/lag-slow").replace(/[.]/g, "\\.")}\\) fell behind: ` +
            "at \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC, 3 deliveries waited for their first attempt, " +
            `the oldest since .* UTC \\(over ${LAG_ALERT_AFTER_MINUTES} min\\)$`,
        ),
      ),
      // Times as the API writes them elsewhere.
      oldestWaitingSince: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      checkedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    expect(await lagAlerts(fresh.id)).toEqual([]);
    expect(await lagAlerts(off.id)).toEqual([]);
    // Its health says so (it said "healthy" while hundreds waited), in the list and the API.
    const [listed] = await endpointHealth(db(), slow.id);
    expect(healthLabel(listed!)).toBe("lagging");
    expect(listed!.lagging).toEqual({
      waiting: 3,
      oldestWaitingSince: expect.any(String),
      checkedAt: expect.any(String),
    });
    expect((await getEndpoint(db(), slow.id)).health.lagging).toMatchObject({ waiting: 3 });
    expect(healthLabel((await endpointHealth(db(), fresh.id))[0]!)).toBe("healthy");

    // Still behind, further: the same alert, brought up to date; nothing new raised,
    // and no id taken by the update (the next alert raised gets the next id).
    await fanOutWebhook(db(), queue, event({ scope: slow.scope }));
    expect((await check()).raised).not.toContain(slow.id);
    expect(await lagAlerts(slow.id)).toEqual([
      expect.objectContaining({ id: alert!.id, open: true, waiting: 4 }),
    ]);
    const later = await waiting("/lag-later", 1, LAG_ALERT_AFTER_MINUTES + 1);
    expect((await check()).raised).toEqual([later.id]);
    expect((await lagAlerts(later.id))[0]!.id).toBe(alert!.id + 1);
  });

  it("resolves it once the endpoint has caught up", async () => {
    const slow = await waiting("/lag-caught-up", 2, LAG_ALERT_AFTER_MINUTES + 1);
    await check();
    // Every waiting delivery attempted (and delivered) since.
    for (const { id } of (
      await t.pool.query("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1", [slow.id])
    ).rows) {
      expect(await deliverWebhook(await deps(), id, 0)).toMatchObject({ kind: "delivered" });
    }
    expect((await check()).cleared).toContain(slow.id);
    expect(await lagAlerts(slow.id)).toEqual([expect.objectContaining({ open: false })]);
    // Resolved saying why: it kept "fell behind" and read as still open.
    expect((await lagAlerts(slow.id))[0]!.message).toMatch(
      new RegExp(
        `fell behind: .*; resolved at .* UTC: it caught up: no delivery has waited over ${LAG_ALERT_AFTER_MINUTES} min for its first attempt$`,
      ),
    );
    expect(healthLabel((await endpointHealth(db(), slow.id))[0]!)).toBe("healthy");
    expect((await getEndpoint(db(), slow.id)).health.lagging).toBeNull();
  });

  it("sweeps checking at once, on separate connections, raise it once", async () => {
    const slow = await waiting("/lag-race", 1, LAG_ALERT_AFTER_MINUTES + 1);
    const pools = [t.newPool(1), t.newPool(1), t.newPool(1), t.newPool(1)];
    const raised = await Promise.all(pools.map((p) => check(drizzle(p) as unknown as Db)));
    await Promise.all(pools.map((p) => p.end()));
    expect(raised.filter((found) => found.raised.includes(slow.id))).toHaveLength(1);
    expect(await lagAlerts(slow.id)).toEqual([expect.objectContaining({ open: true })]);
  });

  it("deleting the endpoint resolves its lagging alert", async () => {
    const slow = await waiting("/lag-deleted", 1, LAG_ALERT_AFTER_MINUTES + 1);
    await check();
    await removeEndpoint(db(), slow.id);
    expect(await lagAlerts(slow.id)).toEqual([expect.objectContaining({ open: false })]);
    expect((await lagAlerts(slow.id))[0]!.message).toMatch(/; resolved: the endpoint was deleted$/);
  });
});

describe("an endpoint that keeps failing (the sweep's failing check)", () => {
  async function failingAlerts(endpointId: string) {
    const { rows } = await t.pool.query(
      `SELECT id::int, resolved_at IS NULL AS open, (details->>'retrying')::int AS retrying, message,
              details->>'lastError' AS "lastError"
         FROM outbox_alerts WHERE kind = 'webhook.endpoint_failing' AND details->>'endpointId' = $1 ORDER BY id`,
      [endpointId],
    );
    return rows as {
      id: number;
      open: boolean;
      retrying: number;
      message: string;
      lastError: string | null;
    }[];
  }
  const check = (on: Db = db()) => evaluateFailingEndpoints(on, { now: new Date() });
  /** Moves the endpoint's run of failures `minutes` into the past. */
  const failingFor = (endpointId: string, minutes: number) =>
    t.pool.query(
      "UPDATE webhook_endpoints SET failing_since = now() - make_interval(mins => $2) WHERE id = $1",
      [endpointId, minutes],
    );

  it("raises one alert while every attempt fails past the threshold, keeps it current, and resolves it at the first success", async () => {
    receiver.state.respond = () => ({ status: 503 });
    const { endpoint, delivery, event: firstEvent } = await oneDelivery("/failing-long");
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "retry" });
    // Failing, but not for long yet: a blip is not an alert.
    await failingFor(endpoint.id, FAILING_ALERT_AFTER_MINUTES - 5);
    expect((await check()).raised).not.toContain(endpoint.id);
    expect(await failingAlerts(endpoint.id)).toEqual([]);

    // Retrying for a day before anything gave up, it said nothing: now it does.
    await failingFor(endpoint.id, FAILING_ALERT_AFTER_MINUTES + 5);
    const first = await check();
    expect(first.raised).toContain(endpoint.id);
    const [alert] = await failingAlerts(endpoint.id);
    expect(alert).toEqual({
      id: expect.any(Number),
      open: true,
      retrying: 1,
      message: expect.stringMatching(
        new RegExp(
          `^webhook endpoint ${endpoint.id} \\(${receiver.url("/failing-long").replace(/[.]/g, "\\.")}\\) has failed every attempt ` +
            `since .* UTC \\(over ${FAILING_ALERT_AFTER_MINUTES} min\\): at .* UTC, 1 delivery waited for a retry; ` +
            "the latest: endpoint answered 503\\. Once it answers, Recover on its page \\(webhooks recover\\) " +
            "sends now its deliveries waiting for a retry, hours apart by then$",
        ),
      ),
      lastError: "endpoint answered 503",
    });
    // Resolved by hand while it lasts, the next sweep raises it again: said with the resolve.
    expect(raisedAgainNote("webhook.endpoint_failing")).toBeDefined();

    // A second failing delivery: the same alert, brought up to date, no new one.
    const e2 = event({ scope: firstEvent.scope });
    await fanOutWebhook(db(), queue, e2);
    const [second] = await deliveriesOf(e2.id);
    await deliverWebhook(await deps(), (second as { id: string }).id, 0);
    expect((await check()).raised).not.toContain(endpoint.id);
    expect(await failingAlerts(endpoint.id)).toEqual([
      expect.objectContaining({ id: alert!.id, open: true, retrying: 2 }),
    ]);

    // The receiver is back: its next attempt succeeds, and the next sweep resolves it.
    receiver.state.respond = () => ({ status: 200 });
    expect(await deliverWebhook(await deps(), delivery.id, 1)).toMatchObject({ kind: "delivered" });
    expect((await check()).cleared).toContain(endpoint.id);
    expect(await failingAlerts(endpoint.id)).toEqual([
      expect.objectContaining({ id: alert!.id, open: false }),
    ]);
    expect((await failingAlerts(endpoint.id))[0]!.message).toMatch(
      /has failed every attempt .*; resolved at .* UTC: an attempt succeeded at .* UTC$/,
    );
  });

  it("is not raised for a disabled endpoint, and resolved when one is disabled or deleted", async () => {
    receiver.state.respond = () => ({ status: 500 });
    const a = await oneDelivery("/failing-disabled");
    const b = await oneDelivery("/failing-deleted");
    for (const { delivery } of [a, b]) await deliverWebhook(await deps(), delivery.id, 0);
    for (const { endpoint } of [a, b]) await failingFor(endpoint.id, FAILING_ALERT_AFTER_MINUTES + 1);
    expect((await check()).raised).toEqual(expect.arrayContaining([a.endpoint.id, b.endpoint.id]));
    await t.pool.query(
      "UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'by hand' WHERE id = $1",
      [a.endpoint.id],
    );
    expect((await check()).cleared).toContain(a.endpoint.id);
    expect((await failingAlerts(a.endpoint.id))[0]!.message).toMatch(
      /; resolved at .* UTC: the endpoint was disabled$/,
    );
    await removeEndpoint(db(), b.endpoint.id);
    expect(await failingAlerts(b.endpoint.id)).toEqual([expect.objectContaining({ open: false })]);
    expect(await check()).not.toMatchObject({ raised: expect.arrayContaining([a.endpoint.id]) });
  });

  it("sweeps checking at once, on separate connections, raise it once", async () => {
    receiver.state.respond = () => ({ status: 500 });
    const { endpoint, delivery } = await oneDelivery("/failing-race");
    await deliverWebhook(await deps(), delivery.id, 0);
    await failingFor(endpoint.id, FAILING_ALERT_AFTER_MINUTES + 1);
    const pools = [t.newPool(1), t.newPool(1), t.newPool(1), t.newPool(1)];
    const raised = await Promise.all(pools.map((p) => check(drizzle(p) as unknown as Db)));
    await Promise.all(pools.map((p) => p.end()));
    expect(raised.filter((found) => found.raised.includes(endpoint.id))).toHaveLength(1);
    expect(await failingAlerts(endpoint.id)).toEqual([expect.objectContaining({ open: true })]);
  });
});

describe("auto-disable", () => {
  it("disables an endpoint whose deliveries have all failed for the configured days, with the reason and an alert", async () => {
    // Close to the real clock: other tests' endpoints started failing just now and must stay enabled.
    const now = new Date();
    const days = (n: number) => new Date(now.getTime() - n * 86_400_000);
    const mk = async (failingSince: Date | null, lastSuccess: Date | null) => {
      const e = await insertEndpoint(t.pool, secrets.key, {
        url: receiver.url("/ad"),
        scope: "auto-disable",
      });
      await t.pool.query(
        "UPDATE webhook_endpoints SET failing_since = $2, last_success_at = $3 WHERE id = $1",
        [e.id, failingSince, lastSuccess],
      );
      return e.id;
    };
    const failingLong = await mk(days(5.1), days(9));
    const failingNever = await mk(days(6), null);
    const failingShort = await mk(days(4.9), days(9));
    const healthy = await mk(null, days(0.1));

    const disabled = await disableFailingEndpoints(db(), { afterDays: 5, now });
    expect(disabled.sort()).toEqual([failingLong, failingNever].sort());
    const { rows } = await t.pool.query(
      "SELECT id, enabled, disabled_reason FROM webhook_endpoints WHERE id = ANY($1)",
      [[failingLong, failingNever, failingShort, healthy]],
    );
    const byId = Object.fromEntries(rows.map((r) => [r.id, r]));
    expect(byId[failingLong]).toMatchObject({
      enabled: false,
      disabled_reason: "every delivery failed for 5 days",
    });
    expect(byId[failingNever]).toMatchObject({ enabled: false });
    expect(byId[failingShort]).toMatchObject({ enabled: true });
    expect(byId[healthy]).toMatchObject({ enabled: true });
    const alerts = await t.pool.query(
      "SELECT details->>'endpointId' AS id FROM outbox_alerts WHERE kind = 'webhook.endpoint_disabled' AND details->>'endpointId' = ANY($1)",
      [[failingLong, failingNever, failingShort, healthy]],
    );
    expect(alerts.rows.map((r) => r.id).sort()).toEqual([failingLong, failingNever].sort());
    const { rows: said } = await t.pool.query(
      `SELECT a.message, e.url FROM outbox_alerts a JOIN webhook_endpoints e ON e.id = (a.details->>'endpointId')::uuid
        WHERE a.kind = 'webhook.endpoint_disabled' AND e.id = $1`,
      [failingLong],
    );
    expect(said[0].message).toBe(
      `webhook endpoint ${failingLong} (${said[0].url}) disabled: every delivery failed for 5 days; events recorded ` +
        "while it is disabled make no delivery for it. Enable it, then recover its failed deliveries",
    );

    // A later sweep, two days on: the short one has now failed for long enough; nothing twice.
    const later = await disableFailingEndpoints(db(), {
      afterDays: 5,
      now: new Date(now.getTime() + 2 * 86_400_000),
    });
    expect(later).toEqual([failingShort]);
  });
});

describe("the cron sweep", () => {
  it("disables long-failing endpoints by its own clock", async () => {
    const e = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/sweep"), scope: "sweep" });
    await t.pool.query(
      "UPDATE webhook_endpoints SET failing_since = now() - interval '2 days' WHERE id = $1",
      [e.id],
    );
    const pool = t.newPool(2);
    const open = openTestPool(pool);
    const env = bindings({
      DATABASE_URL: t.url,
      QSTASH_URL: qstash.url,
      QSTASH_TOKEN: qstash.token,
      WEBHOOK_DISABLE_AFTER_DAYS: "3",
    });
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      const enabled = async () =>
        (await t.pool.query("SELECT enabled FROM webhook_endpoints WHERE id = $1", [e.id])).rows[0].enabled;
      // Two days of failures: not yet.
      await createScheduled(open)({} as ScheduledController, env, executionContext().ctx);
      expect(await enabled()).toBe(true);
      // The sweep's clock two days on: four days of failures, over the configured three.
      const later = () => new Date(Date.now() + 2 * 86_400_000);
      await createScheduled(open, later)({} as ScheduledController, env, executionContext().ctx);
      expect(await enabled()).toBe(false);
      expect(log.mock.calls.at(-1)?.[0]).toContain(`webhook endpoints disabled: ${e.id}`);
    } finally {
      log.mockRestore();
    }
  });
});

describe("operator actions", () => {
  it("a test event goes to that endpoint only, in its scope", async () => {
    const scope = `test-${crypto.randomUUID()}`;
    const target = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/t1"), scope });
    await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/t2"), scope });
    const sent = await sendTestEvent(db(), queue, target.id);
    const { rows } = await t.pool.query(
      "SELECT endpoint_id, scope, event_type, body FROM webhook_deliveries WHERE event_id = $1",
      [sent.eventId],
    );
    expect(rows).toEqual([
      expect.objectContaining({ endpoint_id: target.id, scope, event_type: "webhook.test" }),
    ]);
    expect(JSON.parse(rows[0].body)).toMatchObject({
      type: "webhook.test",
      data: { id: sent.eventId, scope },
    });
    expect(publishedFor(sent.deliveryId)).toHaveLength(1);
    expect(await deliverWebhook(await deps(), sent.deliveryId, 0)).toMatchObject({ kind: "delivered" });
    const req = receiver.received.find((r) => r.path === "/t1")!;
    expect(verifyWebhook(target.secret, req.body, req.headers)).toMatchObject({ type: "webhook.test" });
    expect(receiver.received.filter((r) => r.path === "/t2")).toHaveLength(0);
  });

  it("a test event's alerts name no event: it is none the outbox holds", async () => {
    // Given up on by QStash, and answered 410: both alerts linked to /dashboard/events/<its id>, a 404.
    const given = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/test-given-up") });
    const up = await sendTestEvent(db(), queue, given.id);
    const { rows: carried } = await t.pool.query("SELECT message_id FROM webhook_deliveries WHERE id = $1", [
      up.deliveryId,
    ]);
    expect(
      await markDeliveryFailed(db(), {
        deliveryId: up.deliveryId,
        messageId: carried[0].message_id,
        status: 503,
        retried: 3,
        dlqId: null,
      }),
    ).toEqual({ failed: true });
    const gone = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/test-gone") });
    const sent = await sendTestEvent(db(), queue, gone.id);
    receiver.state.respond = () => ({ status: 410 });
    expect(await deliverWebhook(await deps(), sent.deliveryId, 0)).toEqual({ kind: "gone" });
    const { rows } = await t.pool.query(
      `SELECT kind, event_id, details->>'deliveryId' AS delivery FROM outbox_alerts
        WHERE details->>'endpointId' = ANY($1) ORDER BY kind`,
      [[given.id, gone.id]],
    );
    expect(rows).toEqual([
      { kind: "webhook.delivery_failed", event_id: null, delivery: up.deliveryId },
      { kind: "webhook.endpoint_disabled", event_id: null, delivery: sent.deliveryId },
    ]);
  });

  it("redeliver sends the same webhook-id again through a new job", async () => {
    const { delivery, event: e, endpoint } = await oneDelivery("/again");
    await deliverWebhook(await deps(), delivery.id, 0);
    await redeliver(db(), queue, delivery.id);
    const [row] = await deliveriesOf(e.id);
    expect(row).toMatchObject({ status: "pending" });
    expect(row.message_id).not.toBe(delivery.message_id);
    expect(publishedFor(delivery.id)).toHaveLength(2);
    await deliverWebhook(await deps(), delivery.id, 0);
    const posts = receiver.received.filter((r) => r.path === "/again");
    expect(posts.map((p) => p.headers["webhook-id"])).toEqual([e.id, e.id]);
    for (const p of posts) verifyWebhook(endpoint.secret, p.body, p.headers);
  });

  it("a redeliver while QStash still retries the old job ends the old one: only the new job attempts", async () => {
    // A walkthrough's receiver got two interleaved retry chains after a redeliver
    // (16 attempts for a schedule of 8), each setting the next attempt's time.
    receiver.state.respond = () => ({ status: 500 });
    const { delivery, event: e } = await oneDelivery("/replaced");
    const old = delivery.message_id;
    expect(await deliverWebhook(await deps(), delivery.id, 0, old)).toMatchObject({ kind: "retry" });
    await redeliver(db(), queue, delivery.id);
    const [row] = await deliveriesOf(e.id);
    const current = row.message_id as string;
    expect(current).not.toBe(old);

    // QStash's next retry of the old job: told it is settled, so QStash ends it; no POST.
    expect(await deliverWebhook(await deps(), delivery.id, 1, old)).toEqual({
      kind: "settled",
      status: "superseded",
    });
    expect(receiver.received.filter((r) => r.path === "/replaced")).toHaveLength(1);
    expect((await attemptsOf(delivery.id)).length).toBe(1);
    // The new job carries it.
    expect(await deliverWebhook(await deps(), delivery.id, 0, current)).toMatchObject({ kind: "retry" });
    expect(receiver.received.filter((r) => r.path === "/replaced")).toHaveLength(2);
  });

  it("recover re-sends the endpoint's failed deliveries since a time, and nothing of another endpoint or scope", async () => {
    const scope = `recover-${crypto.randomUUID()}`;
    const mine = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/mine"), scope });
    const theirs = await insertEndpoint(t.pool, secrets.key, {
      url: receiver.url("/theirs"),
      scope: `${scope}-b`,
    });
    const events = [event({ scope }), event({ scope }), event({ scope }), event({ scope: `${scope}-b` })];
    for (const e of events) await fanOutWebhook(db(), queue, e);
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE endpoint_id = ANY($1)",
      [[mine.id, theirs.id]],
    );
    // The oldest failed before the window the operator asks for.
    await t.pool.query(
      "UPDATE webhook_deliveries SET created_at = now() - interval '2 days' WHERE event_id = $1",
      [events[0]!.id],
    );
    const since = new Date(Date.now() - 86_400_000);
    expect(await recoverDeliveries(db(), queue, mine.id, since)).toEqual({
      recovered: 2,
      retrying: 0,
      more: false,
    });
    const { rows } = await t.pool.query(
      "SELECT event_id, status FROM webhook_deliveries WHERE endpoint_id = ANY($1) ORDER BY created_at",
      [[mine.id, theirs.id]],
    );
    const status = Object.fromEntries(rows.map((r) => [r.event_id, r.status]));
    expect(status).toEqual({
      [events[0]!.id]: "failed",
      [events[1]!.id]: "pending",
      [events[2]!.id]: "pending",
      [events[3]!.id]: "failed",
    });
  });

  it("recover also sends now the deliveries waiting for a retry, not one being attempted nor one never attempted", async () => {
    // A receiver down for hours, then fixed: its deliveries wait for retries up to
    // 10 h away, none has given up yet, and a recover that took only failed ones found
    // nothing to do (the month walkthrough's endpoint_failing stayed open meanwhile).
    receiver.state.respond = () => ({ status: 503 });
    const scope = `recover-${crypto.randomUUID()}`;
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/fixed"), scope });
    const [waiting, inFlight, unattempted, failed] = [1, 2, 3, 4].map(() => event({ scope })) as [
      WebhookEvent,
      WebhookEvent,
      WebhookEvent,
      WebhookEvent,
    ];
    for (const e of [waiting, inFlight, unattempted, failed]) await fanOutWebhook(db(), queue, e);
    const rowOf = async (e: WebhookEvent) => (await deliveriesOf(e.id))[0];
    for (const e of [waiting, inFlight, failed]) {
      const row = await rowOf(e);
      expect(await deliverWebhook(await deps(), row.id, 0, row.message_id)).toMatchObject({ kind: "retry" });
    }
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      (await rowOf(failed)).id,
    ]);
    // An attempt of QStash's retry going on right now holds the lease: it is left to finish.
    await t.pool.query(
      "UPDATE webhook_deliveries SET lease_until = now() + interval '1 minute' WHERE id = $1",
      [(await rowOf(inFlight)).id],
    );
    const before = Object.fromEntries(
      await Promise.all(
        [waiting, inFlight, unattempted].map(async (e) => [e.id, (await rowOf(e)).message_id]),
      ),
    );

    receiver.state.respond = () => ({ status: 200 });
    expect(await recoverDeliveries(db(), queue, endpoint.id, new Date(0))).toEqual({
      recovered: 2,
      retrying: 1,
      more: false,
    });
    const waitingRow = await rowOf(waiting);
    expect(waitingRow).toMatchObject({ status: "pending" });
    const { rows: due } = await t.pool.query("SELECT next_attempt_at FROM webhook_deliveries WHERE id = $1", [
      waitingRow.id,
    ]);
    expect(due).toEqual([{ next_attempt_at: null }]);
    expect(waitingRow.message_id).not.toBe(before[waiting.id]);
    expect((await rowOf(inFlight)).message_id).toBe(before[inFlight.id]);
    expect((await rowOf(unattempted)).message_id).toBe(before[unattempted.id]);
    expect(await rowOf(failed)).toMatchObject({ status: "pending" });
    // What it just sent waits for its new job, not for a retry: a second recover sends nothing.
    expect(await recoverDeliveries(db(), queue, endpoint.id, new Date(0))).toEqual({
      recovered: 0,
      retrying: 0,
      more: false,
    });

    // The new job sends it now; the old one, still scheduled in QStash, ends unsent.
    expect(await deliverWebhook(await deps(), waitingRow.id, 0, waitingRow.message_id)).toMatchObject({
      kind: "delivered",
    });
    expect(await deliverWebhook(await deps(), waitingRow.id, 1, before[waiting.id])).toEqual({
      kind: "settled",
      status: "delivered",
    });
  });

  it("each job is published only once its row is committed: QStash delivering at once finds it pending", async () => {
    const { delivery, event: e } = await oneDelivery("/eager");
    await deliverWebhook(await deps(), delivery.id, 0);
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      delivery.id,
    ]);
    // A queue that delivers each job the moment it is published, on a connection of its own.
    const other = drizzle(t.newPool(1)) as unknown as Db;
    const outcomes: string[] = [];
    const eager: DeliverQueue = {
      async enqueue(jobs) {
        const ids = await queue.enqueue(jobs);
        for (const job of jobs)
          outcomes.push((await deliverWebhook(await deps({ db: other }), job.deliveryId, 0)).kind);
        return ids;
      },
    };
    await redeliver(db(), eager, delivery.id);
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      delivery.id,
    ]);
    await recoverDeliveries(db(), eager, (await deliveriesOf(e.id))[0].endpoint_id, new Date(0));
    await sendTestEvent(db(), eager, (await deliveriesOf(e.id))[0].endpoint_id);
    expect(outcomes).toEqual(["delivered", "delivered", "delivered"]);
    expect(receiver.received.filter((r) => r.path === "/eager")).toHaveLength(4);
  });

  it("when publishing fails, redeliver and recover put the rows back and a test event leaves no row", async () => {
    const { delivery, endpoint } = await oneDelivery("/down");
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'failed', failed_at = '2026-01-01T00:00:00Z', last_error = 'endpoint answered 500' WHERE id = $1",
      [delivery.id],
    );
    await expect(redeliver(db(), down, delivery.id)).rejects.toThrow("QStash unreachable");
    await expect(recoverDeliveries(db(), down, endpoint.id, new Date(0))).rejects.toThrow(
      "QStash unreachable",
    );
    const { rows } = await t.pool.query(
      "SELECT status, failed_at, last_error, message_id FROM webhook_deliveries WHERE id = $1",
      [delivery.id],
    );
    // Back as it was, its job's id too: it was left NULL (as if never published).
    expect(delivery.message_id).toMatch(/^msg_/);
    expect(rows[0]).toEqual({
      status: "failed",
      failed_at: new Date("2026-01-01T00:00:00Z"),
      last_error: "endpoint answered 500",
      message_id: delivery.message_id,
    });
    await expect(sendTestEvent(db(), down, endpoint.id)).rejects.toThrow("QStash unreachable");
    const tests = await t.pool.query(
      "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND event_type = 'webhook.test'",
      [endpoint.id],
    );
    expect(tests.rows[0].n).toBe(0);
  });

  it("redeliver and recover resolve the deliveries' alerts once their jobs are in QStash", async () => {
    const delivered = async (path: string) => {
      const { delivery, endpoint } = await oneDelivery(path);
      // As QStash giving up leaves it: failed, with its alert.
      await markDeliveryFailed(db(), {
        deliveryId: delivery.id,
        messageId: delivery.message_id,
        status: 503,
        retried: 3,
        dlqId: null,
      });
      return { delivery, endpoint };
    };
    const openAlerts = async (deliveryId: string) =>
      (
        await t.pool.query(
          "SELECT count(*)::int AS n FROM outbox_alerts WHERE kind = 'webhook.delivery_failed' AND resolved_at IS NULL AND details->>'deliveryId' = $1",
          [deliveryId],
        )
      ).rows[0].n as number;
    const a = await delivered("/alert-a");
    const b = await delivered("/alert-b");
    expect([await openAlerts(a.delivery.id), await openAlerts(b.delivery.id)]).toEqual([1, 1]);

    // Not while QStash refuses: nothing was done about it yet.
    await expect(redeliver(db(), down, a.delivery.id)).rejects.toThrow("QStash unreachable");
    expect(await openAlerts(a.delivery.id)).toBe(1);
    await redeliver(db(), queue, a.delivery.id);
    expect([await openAlerts(a.delivery.id), await openAlerts(b.delivery.id)]).toEqual([0, 1]);
    await recoverDeliveries(db(), queue, b.endpoint.id, new Date(0));
    expect(await openAlerts(b.delivery.id)).toBe(0);
  });

  it("re-enabling an endpoint resolves its disabled alert; deleting one resolves all of its alerts", async () => {
    const openAlerts = async (endpointId: string) => {
      const { rows } = await t.pool.query(
        "SELECT kind FROM outbox_alerts WHERE resolved_at IS NULL AND details->>'endpointId' = $1 ORDER BY kind",
        [endpointId],
      );
      return rows.map((r) => r.kind as string);
    };
    // Each endpoint answers 410 (disabled, with its alert) and has a delivery QStash gave up on.
    const endpoints = [];
    for (const path of ["/gone-a", "/gone-b"]) {
      const { endpoint, delivery } = await oneDelivery(path);
      receiver.state.respond = () => ({ status: 410 });
      expect(await deliverWebhook(await deps(), delivery.id, 0)).toEqual({ kind: "gone" });
      endpoints.push({ endpoint, delivery });
    }
    receiver.state.respond = () => ({ status: 200 });
    for (const { delivery } of endpoints) {
      await t.pool.query("UPDATE webhook_deliveries SET status = 'pending' WHERE id = $1", [delivery.id]);
      const failure = {
        deliveryId: delivery.id,
        status: 410,
        retried: 0,
        dlqId: "dlq",
        messageId: delivery.message_id,
      };
      expect(await markDeliveryFailed(db(), failure)).toEqual({ failed: true });
    }
    const [a, b] = endpoints.map((x) => x.endpoint.id) as [string, string];
    const both = ["webhook.delivery_failed", "webhook.endpoint_disabled"];
    expect(await openAlerts(a)).toEqual(both);
    expect(await openAlerts(b)).toEqual(both);

    // Editing the description of a disabled endpoint answers nothing; enabling it answers its disabled alert.
    await updateEndpoint(db(), a, { description: "renamed" }, { allowPrivate: true });
    expect(await openAlerts(a)).toEqual(both);
    await updateEndpoint(db(), a, { enabled: true }, { allowPrivate: true });
    expect(await openAlerts(a)).toEqual(["webhook.delivery_failed"]);
    const { rows: enabled } = await t.pool.query(
      "SELECT message FROM outbox_alerts WHERE kind = 'webhook.endpoint_disabled' AND details->>'endpointId' = $1",
      [a],
    );
    expect(enabled[0].message).toMatch(/; resolved: the endpoint was enabled again$/);
    expect(await openAlerts(b)).toEqual(both);

    await removeEndpoint(db(), b);
    expect(await openAlerts(b)).toEqual([]);
    expect(await openAlerts(a)).toEqual(["webhook.delivery_failed"]);
  });

  it("actions on a disabled or unknown endpoint are refused", async () => {
    const off = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/off"), enabled: false });
    await expect(sendTestEvent(db(), queue, off.id)).rejects.toMatchObject({ code: "illegal_transition" });
    await expect(recoverDeliveries(db(), queue, off.id, new Date(0))).rejects.toMatchObject({
      code: "illegal_transition",
    });
    await expect(sendTestEvent(db(), queue, crypto.randomUUID())).rejects.toMatchObject({
      code: "not_found",
    });
    await expect(redeliver(db(), queue, crypto.randomUUID())).rejects.toMatchObject({ code: "not_found" });
  });
});

describe("lost publishes and retention (the cron sweep's share)", () => {
  const minutes = (n: number) => new Date(Date.now() + n * 60_000);

  it("a redeliver that died between its commit and its publish is published by a later sweep, once", async () => {
    const { delivery, event: e, endpoint } = await oneDelivery("/lost");
    await deliverWebhook(await deps(), delivery.id, 0);
    // The request dies mid-publish: its commit happened, its publish never returns.
    const dead: DeliverQueue = { enqueue: () => new Promise<string[]>(() => undefined) };
    void redeliver(db(), dead, delivery.id);
    await vi.waitFor(async () => expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "pending" }));
    expect((await deliveriesOf(e.id))[0].message_id).toBeNull();
    const before = publishedFor(delivery.id).length;

    // Too soon: the publish may still be on its way.
    expect(await publishUnpublished(db(), queue, new Date())).toBe(0);
    expect(await publishUnpublished(db(), queue, minutes(UNPUBLISHED_AFTER_MINUTES + 1))).toBe(1);
    const [row] = await deliveriesOf(e.id);
    expect(row.message_id).toEqual(expect.any(String));
    expect(publishedFor(delivery.id)).toHaveLength(before + 1);
    // Published once: the next sweeps find nothing to do for it.
    expect(await publishUnpublished(db(), queue, minutes(UNPUBLISHED_AFTER_MINUTES * 3))).toBe(0);

    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "delivered" });
    const posts = receiver.received.filter((r) => r.path === "/lost");
    expect(posts.map((p) => p.headers["webhook-id"])).toEqual([e.id, e.id]);
    for (const p of posts) verifyWebhook(endpoint.secret, p.body, p.headers);
  });

  it("a fan-out whose publish failed for good is repaired too; a failed sweep publish is retried by the next", async () => {
    const {
      event: e,
      rows: [orphan],
    } = await lostDeliveries("lost", ["/lost-fanout"]);

    await expect(publishUnpublished(db(), down, minutes(6))).rejects.toThrow("QStash unreachable");
    expect((await deliveriesOf(e.id))[0]).toMatchObject({ status: "pending", message_id: null });
    // Stamped by the failed try: the next sweep a minute later leaves it, a later one publishes it.
    expect(await publishUnpublished(db(), queue, minutes(7))).toBe(0);
    expect(await publishUnpublished(db(), queue, minutes(12))).toBe(1);
    expect(publishedFor(orphan.id)).toHaveLength(1);
  });

  it("two sweeps at once publish each lost row once", async () => {
    const { rows } = await lostDeliveries("lost2", ["/l1", "/l2", "/l3"]);
    expect(rows).toHaveLength(3);
    // Each sweep on a connection of its own, as two overlapping cron invocations.
    const [a, b] = [drizzle(t.newPool(1)) as unknown as Db, drizzle(t.newPool(1)) as unknown as Db];
    const counts = await Promise.all([
      publishUnpublished(a, queue, minutes(6)),
      publishUnpublished(b, queue, minutes(6)),
    ]);
    expect(counts[0] + counts[1]).toBe(3);
    for (const row of rows) expect(publishedFor(row.id)).toHaveLength(1);
  });

  it("a sweep passes over a row another transaction holds and publishes the rest without waiting for it", async () => {
    const {
      rows: [held, ...free],
    } = await lostDeliveries("held", ["/h1", "/h2", "/h3"]);

    // Another sweep (or an operator's action) holds one row in an open transaction.
    const holder = await t.pool.connect();
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE", [held.id]);
      // A plain FOR UPDATE would wait here for as long as the holder lives; the holder
      // only ends after this sweep, so waiting shows as the sweep never returning.
      const waited = new Promise<"waited on the held row">((resolve) => {
        timer = setTimeout(() => resolve("waited on the held row"), 10_000);
      });
      const swept = await Promise.race([publishUnpublished(db(), queue, minutes(6)), waited]);
      expect(swept).toEqual(expect.any(Number));
      for (const row of free) expect(publishedFor(row.id)).toHaveLength(1);
      expect(publishedFor(held.id)).toHaveLength(0);
    } finally {
      clearTimeout(timer);
      await holder.query("ROLLBACK");
      holder.release();
    }
    // Left pending and unstamped, so the next sweep takes it.
    expect(await publishUnpublished(db(), queue, minutes(7))).toBeGreaterThanOrEqual(1);
    expect(publishedFor(held.id)).toHaveLength(1);
  });

  it("retention deletes finished deliveries older than the cut-off with their attempts, never pending ones", async () => {
    const scope = `old-${crypto.randomUUID()}`;
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/old"), scope });
    const events = [event({ scope }), event({ scope }), event({ scope }), event({ scope })];
    for (const e of events) await fanOutWebhook(db(), queue, e);
    const ids = [];
    for (const e of events) ids.push((await deliveriesOf(e.id))[0].id as string);
    for (const id of ids.slice(0, 2)) await deliverWebhook(await deps(), id, 0);
    // 0 delivered and old, 1 delivered and recent, 2 failed and old, 3 pending and old.
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      ids[2],
    ]);
    await t.pool.query(
      "UPDATE webhook_deliveries SET created_at = now() - interval '31 days' WHERE id = ANY($1)",
      [[ids[0], ids[2], ids[3]]],
    );
    expect((await attemptsOf(ids[0]!)).length).toBe(1);

    const deleted = await deleteOldDeliveries(db(), { olderThanDays: 30, now: new Date() });
    expect(deleted).toBeGreaterThanOrEqual(2);
    const { rows } = await t.pool.query(
      "SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at",
      [endpoint.id],
    );
    expect(rows.map((r) => r.id).sort()).toEqual([ids[1], ids[3]].sort());
    expect(await attemptsOf(ids[0]!)).toEqual([]);
  });

  it("retention keeps old failed deliveries while their endpoint's open alert counts them as owed", async () => {
    const scope = `owed-${crypto.randomUUID()}`;
    const endpoint = await insertEndpoint(t.pool, secrets.key, { url: receiver.url("/owed"), scope });
    const events = [event({ scope }), event({ scope })];
    for (const e of events) await fanOutWebhook(db(), queue, e);
    const [failed, delivered] = [
      (await deliveriesOf(events[0]!.id))[0].id,
      (await deliveriesOf(events[1]!.id))[0].id,
    ];
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      failed,
    ]);
    await t.pool.query("UPDATE webhook_deliveries SET status = 'delivered' WHERE id = $1", [delivered]);
    await t.pool.query(
      "UPDATE webhook_deliveries SET created_at = now() - interval '31 days' WHERE endpoint_id = $1",
      [endpoint.id],
    );
    const { rows: alert } = await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message, details)
       VALUES ('webhook.delivery_failed', 'webhook.deliver', '1 delivery failure', jsonb_build_object('endpointId', $1::text))
       RETURNING id`,
      [endpoint.id],
    );
    const left = async () =>
      (
        await t.pool.query("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1", [endpoint.id])
      ).rows.map((r) => r.id);
    // The alert says they failed and recover re-sends them: they stay, the delivered one goes.
    await deleteOldDeliveries(db(), { olderThanDays: 30, now: new Date() });
    expect(await left()).toEqual([failed]);
    // Someone looked and let them be: they go as any other.
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE id = $1", [alert[0].id]);
    await deleteOldDeliveries(db(), { olderThanDays: 30, now: new Date() });
    expect(await left()).toEqual([]);
  });

  it("the cron sweep runs both and says so", async () => {
    const {
      event: e,
      rows: [orphan],
    } = await lostDeliveries("sweep-lost", ["/sweep-lost"]);
    const open = openTestPool(t.newPool(2));
    const env = bindings({ DATABASE_URL: t.url, QSTASH_URL: qstash.url, QSTASH_TOKEN: qstash.token });
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      await createScheduled(open, () => minutes(6))({} as ScheduledController, env, executionContext().ctx);
      expect(log.mock.calls.at(-1)?.[0]).toMatch(
        /re-published [1-9]\d* webhook deliveries whose publish was lost/,
      );
      expect(log.mock.calls.at(-1)?.[0]).toMatch(
        /; webhook endpoints behind: \d+(, newly: [0-9a-f-, ]+)?(, caught up: [0-9a-f-, ]+)?; /,
      );
      expect(log.mock.calls.at(-1)?.[0]).toMatch(
        /; webhook endpoints failing: \d+(, newly: [0-9a-f-, ]+)?(, recovered: [0-9a-f-, ]+)?; /,
      );
      expect(log.mock.calls.at(-1)?.[0]).toMatch(
        /retention past 30 d deleted \d+ finished webhook deliveries, \d+ alerts resolved by then, \d+ settled job failures and \d+ mail records;/,
      );
    } finally {
      log.mockRestore();
    }
    expect(publishedFor(orphan.id)).toHaveLength(1);
    expect((await deliveriesOf(e.id))[0].message_id).toEqual(expect.any(String));
  });
});

describe("lost jobs (the cron sweep's share)", () => {
  const minutes = (n: number) => new Date(Date.now() + n * 60_000);
  // The dev server, asked as QStash would be. Its delivery is paused in this file, so
  // every job it was given is still held: a case loses one by deleting it.
  const messages = () => createQStashMessages({ baseUrl: qstash.url, token: qstash.token });
  const lose = async (messageId: string) => {
    const res = await fetch(`${qstash.url}/v2/messages/${messageId}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${qstash.token}` },
    });
    expect(res.status).toBe(202);
  };
  // Other deliveries of this file may be swept too: each case looks at its own rows.

  it("a retry QStash no longer holds is published again half an hour after it was due, once", async () => {
    const { delivery, event: e, endpoint } = await oneDelivery("/overdue");
    receiver.state.respond = () => ({ status: 503 });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({
      kind: "retry",
      retryAfterSeconds: SCHEDULE[0],
    });
    const [first] = await deliveriesOf(e.id);
    await lose(first.message_id);
    const before = publishedFor(delivery.id).length;

    // Due in 5 s. Late by less than OVERDUE_AFTER_MINUTES, QStash may yet come.
    await publishOverdue(db(), queue, messages(), minutes(OVERDUE_AFTER_MINUTES - 1));
    expect(publishedFor(delivery.id)).toHaveLength(before);
    // Later than that, and QStash no longer has it: a new job.
    expect(
      await publishOverdue(db(), queue, messages(), minutes(OVERDUE_AFTER_MINUTES + 1)),
    ).toBeGreaterThanOrEqual(1);
    expect(publishedFor(delivery.id)).toHaveLength(before + 1);
    const [again] = await deliveriesOf(e.id);
    expect(again.message_id).toEqual(expect.any(String));
    expect(again.message_id).not.toBe(first.message_id);
    // Once: the next sweeps leave it to the new job.
    await publishOverdue(db(), queue, messages(), minutes(OVERDUE_AFTER_MINUTES + 2));
    expect(publishedFor(delivery.id)).toHaveLength(before + 1);

    // Which delivers it, signed as ever, under the same webhook-id.
    receiver.state.respond = () => ({ status: 204 });
    expect(await deliverWebhook(await deps(), delivery.id, 0)).toMatchObject({ kind: "delivered" });
    const posts = receiver.received.filter((r) => r.path === "/overdue");
    expect(posts.map((p) => p.headers["webhook-id"])).toEqual([e.id, e.id]);
    verifyWebhook(endpoint.secret, posts[1]!.body, posts[1]!.headers);
  });

  it("a job lost before its first attempt is published again too", async () => {
    const { delivery } = await oneDelivery("/never-tried");
    await lose(delivery.message_id);
    const before = publishedFor(delivery.id).length;
    await publishOverdue(db(), queue, messages(), minutes(OVERDUE_AFTER_MINUTES - 1));
    expect(publishedFor(delivery.id)).toHaveLength(before);
    await publishOverdue(db(), queue, messages(), minutes(OVERDUE_AFTER_MINUTES + 1));
    expect(publishedFor(delivery.id)).toHaveLength(before + 1);
  });

  it("a job QStash still holds (late behind flow control) is left to it, and asked about again later", async () => {
    const { delivery, event: e } = await oneDelivery("/queued");
    const before = publishedFor(delivery.id).length;
    const asked: string[] = [];
    const counting = {
      holds: (id: string) => {
        asked.push(id);
        return messages().holds(id);
      },
    };
    await publishOverdue(db(), queue, counting, minutes(OVERDUE_AFTER_MINUTES + 1));
    expect(asked).toContain(delivery.message_id);
    expect(publishedFor(delivery.id)).toHaveLength(before);
    expect((await deliveriesOf(e.id))[0].message_id).toBe(delivery.message_id);
    // Stamped: a sweep soon after does not ask again; one half an hour after that does.
    asked.length = 0;
    await publishOverdue(db(), queue, counting, minutes(OVERDUE_AFTER_MINUTES + 5));
    expect(asked).not.toContain(delivery.message_id);
    await lose(delivery.message_id);
    await publishOverdue(db(), queue, counting, minutes(2 * OVERDUE_AFTER_MINUTES + 2));
    expect(asked).toContain(delivery.message_id);
    expect(publishedFor(delivery.id)).toHaveLength(before + 1);
  });

  it("leaves a delivery whose retries are spent, and one whose attempt is under way, without asking", async () => {
    // Spent: attempted, no retry due. QStash's failure callback fails it; a new job
    // would give it a whole new schedule.
    const spent = await oneDelivery("/spent");
    receiver.state.respond = () => ({ status: 503 });
    expect(await deliverWebhook(await deps(), spent.delivery.id, SCHEDULE.length)).toMatchObject({
      kind: "retry",
      retryAfterSeconds: null,
    });
    // Under way: another delivery of its job holds the lease.
    const leased = await oneDelivery("/leased");
    await t.pool.query(
      "UPDATE webhook_deliveries SET lease_until = now() + interval '2 hours' WHERE id = $1",
      [leased.delivery.id],
    );
    await lose(spent.delivery.message_id);
    await lose(leased.delivery.message_id);
    const before = [publishedFor(spent.delivery.id).length, publishedFor(leased.delivery.id).length];
    const asked: string[] = [];
    await publishOverdue(
      db(),
      queue,
      { holds: async (id) => (asked.push(id), false) },
      minutes(OVERDUE_AFTER_MINUTES + 10),
    );
    expect(asked).not.toContain(spent.delivery.message_id);
    expect(asked).not.toContain(leased.delivery.message_id);
    expect([publishedFor(spent.delivery.id).length, publishedFor(leased.delivery.id).length]).toEqual(before);
  });
});
