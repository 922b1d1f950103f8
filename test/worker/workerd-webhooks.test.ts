import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { signJwt } from "../../infra/qstash-dev/server.ts";
import type { Db } from "../../src/domain/db.ts";
import { createQStashDeliverQueue, DELIVER_PARALLELISM } from "../../src/domain/webhooks/deliver-queue.ts";
import { redeliver } from "../../src/domain/webhooks/redeliver.ts";
import { startReceiver } from "../qstash-dev/receiver.ts";
import { freePort } from "../../src/node/postgres.ts";
import { newApiKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout, waitFor } from "../support/helpers.ts";
import { useSecretsKey, verifyWebhook } from "../support/webhooks.ts";
import { request, useWorkerd } from "../support/workerd.ts";

// Webhooks end to end in workerd: a write commits an event, the relay publishes
// webhook.fanout to the QStash dev server, which delivers it to the Worker, which
// publishes webhook.deliver jobs, which POST to a receiver this file controls.
// QStash runs at real time here (scale 1): attempts are seconds apart, as the
// schedule (WEBHOOK_RETRY_SCHEDULE=1,1) says, so each is signed at its own second.
const t = useTestDatabase();
const secrets = useSecretsKey();
const stack = useWorkerd(
  t,
  { WEBHOOK_SECRETS_KEY: secrets.base64, WEBHOOK_RETRY_SCHEDULE: "1,1", WEBHOOK_ALLOW_PRIVATE_URLS: "true" },
  { qstashTimeScale: 1 },
);
const ADMIN = () => ({ Authorization: `Bearer ${stack.env.ADMIN_TOKEN}` });
let receiver: Awaited<ReturnType<typeof startReceiver>>;

beforeAll(async () => {
  receiver = await startReceiver();
});
afterAll(() => receiver?.close());
beforeEach(() => receiver.reset());

/** Registers an endpoint the way an operator does: through the admin API, which answers its secret once. */
async function createEndpoint(fixture: {
  url: string;
  scope: string | null;
  types?: string[];
  enabled?: boolean;
}) {
  const created = await request(
    stack,
    "POST",
    "/admin/webhooks/endpoints",
    { url: fixture.url, scope: fixture.scope, ...(fixture.types ? { types: fixture.types } : {}) },
    ADMIN(),
  );
  expect(created.status).toBe(201);
  const id: string = created.body.endpoint.id;
  if (fixture.enabled === false) {
    const off = await request(stack, "PATCH", `/admin/webhooks/endpoints/${id}`, { enabled: false }, ADMIN());
    expect(off.status).toBe(200);
  }
  return { id, secret: created.body.secret as string };
}

const postsTo = (path: string) => receiver.received.filter((r) => r.path === path);

async function deliveryOf(eventId: string, endpointId: string) {
  const { rows } = await t.pool.query(
    "SELECT id, status, attempts, last_error FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id = $2",
    [eventId, endpointId],
  );
  return rows[0] as { id: string; status: string; attempts: number; last_error: string | null } | undefined;
}

// Notes are written as a tenant would: with an API key of the note's scope.
const keys = new Map<string | null, string>();
async function keyFor(scope: string | null): Promise<string> {
  let key = keys.get(scope);
  if (!key) keys.set(scope, (key = await newApiKey(t.db, scope)));
  return key;
}

async function createNote(scope: string | null, title = "Hello") {
  const res = await request(
    stack,
    "POST",
    "/notes",
    { title, scope },
    { Prefer: "wait=5", Authorization: `Bearer ${await keyFor(scope)}` },
  );
  expect(res.status).toBe(201);
  return { noteId: res.body.note.id as string, eventId: res.body.events[0].id as string };
}

describe("a note write", () => {
  it("ends as a POST at the endpoint that the standardwebhooks package verifies", async () => {
    const scope = "tenant-write";
    const endpoint = await createEndpoint({
      url: receiver.url("/write"),
      scope,
      types: ["corpus.note.*"],
    });
    const { noteId, eventId } = await createNote(scope, "Shipped");
    const [post] = await receiver.waitForRequests(1, "/write", 20_000);
    const payload = verifyWebhook(endpoint.secret, post!.body, post!.headers);
    expect(post!.headers["webhook-id"]).toBe(eventId);
    expect(post!.headers["content-type"]).toBe("application/json");
    expect(payload).toMatchObject({
      type: "corpus.note.created",
      timestamp: expect.any(String),
      data: { id: eventId, subject: noteId, scope, payload: expect.objectContaining({ noteId }) },
    });
    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "delivered", 10_000);
    // The operator's view of the event says what its webhooks did, as `events show` does.
    const shown = await request(stack, "GET", `/admin/events/${eventId}`, undefined, ADMIN());
    expect(shown.body.event.webhookDeliveries).toEqual([
      expect.objectContaining({ endpointId: endpoint.id, status: "delivered", attempts: 1 }),
    ]);
    // With deliveries there is nothing to explain.
    expect(shown.body.event.webhooksNote).toBeNull();
  });
});

describe("a rotated secret", () => {
  it("signs beside the new one: the delivered header verifies with either, and the attempt is in the log", async () => {
    const endpoint = await createEndpoint({ url: receiver.url("/rotated"), scope: "rotated" });
    const rotated = await request(
      stack,
      "POST",
      `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`,
      undefined,
      ADMIN(),
    );
    expect(rotated.status).toBe(200);
    receiver.state.respond = (r) =>
      r.path === "/rotated"
        ? { status: 202, headers: { "content-type": "text/plain" }, body: "queued" }
        : { status: 200 };
    const { eventId } = await createNote("rotated");
    const [post] = await receiver.waitForRequests(1, "/rotated", 20_000);
    expect(post!.headers["webhook-signature"]!.toString().split(" ")).toHaveLength(2);
    expect(verifyWebhook(rotated.body.secret, post!.body, post!.headers).data.id).toBe(eventId);
    expect(verifyWebhook(endpoint.secret, post!.body, post!.headers).data.id).toBe(eventId);

    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "delivered", 10_000);
    const delivery = await deliveryOf(eventId, endpoint.id);
    const detail = await request(
      stack,
      "GET",
      `/admin/webhooks/deliveries/${delivery!.id}`,
      undefined,
      ADMIN(),
    );
    expect(detail.status).toBe(200);
    expect(detail.body.delivery.attempts).toEqual([
      expect.objectContaining({
        status: 202,
        error: null,
        durationMs: expect.any(Number),
        responseHeaders: expect.objectContaining({ "content-type": "text/plain" }),
        responseBody: "queued",
      }),
    ]);
    expect(JSON.stringify(detail.body)).not.toContain(endpoint.secret.slice(6));
  });
});

describe("retries, carried out by QStash", () => {
  it("503 twice then 200: three attempts, one webhook-id, a fresh timestamp each", async () => {
    const endpoint = await createEndpoint({
      url: receiver.url("/flaky"),
      scope: "flaky",
    });
    let n = 0;
    receiver.state.respond = (r) => (r.path === "/flaky" && ++n <= 2 ? { status: 503 } : { status: 200 });
    const { eventId } = await createNote("flaky");
    const posts = await receiver.waitForRequests(3, "/flaky", 30_000);
    expect(posts.map((p) => p.headers["webhook-id"])).toEqual([eventId, eventId, eventId]);
    const stamps = posts.map((p) => Number(p.headers["webhook-timestamp"]));
    expect(stamps[1]).toBeGreaterThan(stamps[0]!);
    expect(stamps[2]).toBeGreaterThan(stamps[1]!);
    for (const p of posts) verifyWebhook(endpoint.secret, p.body, p.headers);
    expect(new Set(posts.map((p) => p.body)).size).toBe(1);

    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "delivered", 10_000);
    const delivery = await deliveryOf(eventId, endpoint.id);
    const { rows } = await t.pool.query(
      "SELECT status FROM webhook_attempts WHERE delivery_id = $1 ORDER BY id",
      [delivery!.id],
    );
    expect(rows.map((r) => r.status)).toEqual([503, 503, 200]);
    expect(delivery!.attempts).toBe(3);
  });

  it("a receiver's Retry-After, when longer than the schedule, sets the next attempt", async () => {
    await createEndpoint({ url: receiver.url("/busy"), scope: "busy" });
    let n = 0;
    receiver.state.respond = (r) =>
      r.path === "/busy" && ++n === 1 ? { status: 429, headers: { "retry-after": "3" } } : { status: 200 };
    const { eventId } = await createNote("busy");
    const [first, second] = await receiver.waitForRequests(2, "/busy", 30_000);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(2_900);
    // QStash was told to wait the receiver's 3 s, not the schedule's 1 s.
    const deliveryId = (
      await t.pool.query("SELECT id FROM webhook_deliveries WHERE event_id = $1", [eventId])
    ).rows[0].id as string;
    const job = await stack.qstash.waitFor((messages) =>
      messages.find(
        (m) =>
          m.url.endsWith("/jobs/webhook.deliver") && m.body.includes(deliveryId) && m.state === "DELIVERED",
      ),
    );
    expect(job.attempts.map((a) => a.status)).toEqual([503, 200]);
    expect(job.attempts[0]).toMatchObject({ nextRetryDelayMs: 3_000, nextRetryDelaySource: "retry-after" });
  });

  it("exhausted retries fail the delivery and raise webhook.delivery_failed", async () => {
    const endpoint = await createEndpoint({ url: receiver.url("/dead"), scope: "dead" });
    receiver.state.respond = (r) => (r.path === "/dead" ? { status: 500, body: "boom" } : { status: 200 });
    const { eventId } = await createNote("dead");
    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "failed", 30_000);
    expect(postsTo("/dead")).toHaveLength(3);
    const delivery = await deliveryOf(eventId, endpoint.id);
    expect(delivery).toMatchObject({ attempts: 3, last_error: "endpoint answered 500" });
    const alerts = await request(stack, "GET", "/admin/alerts?open=true", undefined, ADMIN());
    expect(alerts.body.alerts).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          kind: "webhook.delivery_failed",
          eventId,
          details: expect.objectContaining({ deliveryId: delivery!.id, endpointId: endpoint.id }),
        }),
      ]),
    );
    // The endpoint keeps its failing streak for the auto-disable sweep.
    const { rows } = await t.pool.query(
      "SELECT failing_since, enabled FROM webhook_endpoints WHERE id = $1",
      [endpoint.id],
    );
    expect(rows[0]).toMatchObject({ failing_since: expect.any(Date), enabled: true });
  });
});

describe("a deliver job with more retries than the schedule", () => {
  it("still ends when the Worker's schedule does: the delivery fails, QStash does not retry on", async () => {
    const endpoint = await createEndpoint({ url: receiver.url("/too-many"), scope: "too-many" });
    receiver.state.respond = (r) => (r.path === "/too-many" ? { status: 500 } : { status: 200 });
    const { eventId } = await createNote("too-many");
    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "failed", 30_000);
    expect(postsTo("/too-many")).toHaveLength(3);

    // Re-sent as a CLI without this Worker's WEBHOOK_RETRY_SCHEDULE would: with the
    // default schedule's seven retries.
    const queue = createQStashDeliverQueue({
      baseUrl: stack.qstash.url,
      token: stack.qstash.token,
      publicUrl: stack.url,
      retries: 7,
    });
    const delivery = await deliveryOf(eventId, endpoint.id);
    await redeliver(t.db as unknown as Db, queue, delivery!.id);
    // Three attempts again (the schedule "1,1"), then the 489 ends the job and its
    // failure callback fails the delivery. Before, the third answer was a 503 without
    // Retry-After and QStash went on by its own backoff, the delivery pending meanwhile.
    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "failed", 30_000);
    expect(postsTo("/too-many")).toHaveLength(6);
    const job = stack.qstash.messages().find((m) => m.kind !== "failure-callback" && m.maxRetries === 7);
    // The deliver route's answers to QStash: retry, retry, stop.
    expect(job?.attempts.map((a) => a.status)).toEqual([503, 503, 489]);
  }, 60_000);
});

describe("no answer", () => {
  it("a refused connection is an attempt without a status, retried", async () => {
    const port = await freePort();
    const endpoint = await createEndpoint({ url: `http://127.0.0.1:${port}/nobody`, scope: "refused" });
    const { eventId } = await createNote("refused");
    await waitFor(async () => {
      const d = await deliveryOf(eventId, endpoint.id);
      return d !== undefined && d.attempts >= 1 && d.last_error !== null;
    }, 20_000);
    const delivery = await deliveryOf(eventId, endpoint.id);
    const { rows } = await t.pool.query(
      "SELECT status, error, response_body FROM webhook_attempts WHERE delivery_id = $1",
      [delivery!.id],
    );
    // workerd reports every failed connection as "Network connection lost.", so on
    // Workers a refused port is `network`; Node's fetch names it (delivery.test.ts).
    expect(rows[0]).toEqual({ status: null, error: "network", response_body: null });
    expect(delivery!.last_error).toBe("no answer: network");
  });
});

describe("410 Gone", () => {
  it("disables the endpoint at once; later events are not delivered to it", async () => {
    const gone = await createEndpoint({ url: receiver.url("/gone"), scope: "gone" });
    await createEndpoint({
      url: receiver.url("/control"),
      scope: "gone",
    });
    receiver.state.respond = (r) => (r.path === "/gone" ? { status: 410 } : { status: 200 });
    const first = await createNote("gone");
    await waitFor(async () => (await deliveryOf(first.eventId, gone.id))?.status === "failed", 20_000);
    expect(postsTo("/gone")).toHaveLength(1);
    const { rows } = await t.pool.query(
      "SELECT enabled, disabled_reason FROM webhook_endpoints WHERE id = $1",
      [gone.id],
    );
    expect(rows[0]).toEqual({ enabled: false, disabled_reason: "endpoint answered 410 Gone" });

    const later = await createNote("gone");
    await receiver.waitForRequests(2, "/control", 20_000);
    expect(postsTo("/control").map((p) => p.headers["webhook-id"])).toEqual([first.eventId, later.eventId]);
    expect(await deliveryOf(later.eventId, gone.id)).toBeUndefined();
    expect(postsTo("/gone")).toHaveLength(1);
  });
});

describe("no coalescing", () => {
  it("a burst of 50 updates to one note: every event reaches the endpoint exactly once", async () => {
    const endpoint = await createEndpoint({
      url: receiver.url("/burst"),
      scope: "burst",
    });
    const { noteId } = await createNote("burst", "v0");
    // 50 committed updates with no kick between them, so one relay pass claims them
    // all together: a coalescing subscription would get one job for the lot.
    for (let i = 1; i <= 50; i++) {
      await t.pool.query("UPDATE corpus_notes SET title = $2 WHERE id = $1", [noteId, `v${i}`]);
    }
    const swept = await stack.fetch("/__scheduled?cron=*+*+*+*+*");
    expect(swept.status).toBe(200);
    const events = await eventsAbout(t.pool, noteId);
    expect(events).toHaveLength(51);
    await receiver.waitForRequests(51, "/burst", 60_000);
    await waitFor(async () => {
      const { rows } = await t.pool.query(
        "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'",
        [endpoint.id],
      );
      return rows[0].n === 51;
    }, 20_000);
    const ids = postsTo("/burst").map((p) => p.headers["webhook-id"]);
    expect(ids).toHaveLength(51);
    expect([...ids].sort()).toEqual(events.map((e) => e.id).sort());
    for (const p of postsTo("/burst")) verifyWebhook(endpoint.secret, p.body, p.headers);
    // One deliver job per event, each settled: nothing is still on its way to post twice.
    const { rows } = await t.pool.query("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1", [
      endpoint.id,
    ]);
    const jobsOf = (messages: ReturnType<typeof stack.qstash.messages>) =>
      messages.filter(
        (m) => m.url.endsWith("/jobs/webhook.deliver") && rows.some((r) => m.body.includes(r.id)),
      );
    const jobs = await stack.qstash.waitFor((messages) => {
      const mine = jobsOf(messages);
      return mine.every((m) => m.state === "DELIVERED") && mine;
    });
    expect(jobs).toHaveLength(51);
  }, 120_000);
});

describe("a slow receiver", () => {
  it("holds only its own endpoint's delivery slots: another endpoint's webhooks arrive meanwhile", async () => {
    const scope = "noisy";
    const slow = await createEndpoint({ url: receiver.url("/slow"), scope });
    const fast = await createEndpoint({ url: receiver.url("/fast"), scope });
    // The slow receiver answers nothing until released, well inside the Worker's 15 s timeout.
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    receiver.state.respond = async (r) => {
      if (r.path === "/slow") await held;
      return { status: 200, body: "ok" };
    };
    // More events than one endpoint's budget, committed without kicks between them.
    const events = DELIVER_PARALLELISM + 5;
    try {
      const { noteId } = await createNote(scope, "v0");
      for (let i = 1; i < events; i++) {
        await t.pool.query("UPDATE corpus_notes SET title = $2 WHERE id = $1", [noteId, `v${i}`]);
      }
      expect((await stack.fetch("/__scheduled?cron=*+*+*+*+*")).status).toBe(200);
      await receiver.waitForRequests(DELIVER_PARALLELISM, "/slow", 20_000);
      // With one budget for every endpoint, the slow receiver's held deliveries took
      // all of it, and the rest of the fast endpoint's waited for their timeouts.
      await receiver.waitForRequests(events, "/fast", 12_000);
      // And the slow one is held to its own budget: no more of its deliveries started.
      expect(postsTo("/slow")).toHaveLength(DELIVER_PARALLELISM);
      expect(receiver.maxActive("/slow")).toBe(DELIVER_PARALLELISM);
    } finally {
      release();
    }
    await receiver.waitForRequests(events, "/slow", 30_000);
    await waitFor(async () => {
      const { rows } = await t.pool.query(
        "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = ANY($1) AND status = 'delivered'",
        [[slow.id, fast.id]],
      );
      return rows[0].n === 2 * events;
    }, 20_000);
  }, 90_000);
});

describe("operator actions keep to the endpoint's scope", () => {
  it("test, redeliver and recover reach only the endpoint they name", async () => {
    const a = await createEndpoint({ url: receiver.url("/scope-a"), scope: "scope-a" });
    const b = await createEndpoint({ url: receiver.url("/scope-b"), scope: "scope-b" });

    // An event of scope a reaches a only.
    const { eventId } = await createNote("scope-a");
    await receiver.waitForRequests(1, "/scope-a", 20_000);
    await waitFor(async () => (await deliveryOf(eventId, a.id))?.status === "delivered", 10_000);

    // A test event to b goes to b, in b's scope.
    const sent = await request(stack, "POST", `/admin/webhooks/endpoints/${b.id}/test`, undefined, ADMIN());
    expect(sent.status).toBe(202);
    const [test] = await receiver.waitForRequests(1, "/scope-b", 20_000);
    expect(verifyWebhook(b.secret, test!.body, test!.headers)).toMatchObject({
      type: "webhook.test",
      data: { id: sent.body.eventId, scope: "scope-b" },
    });

    // Redeliver a's delivery: the same webhook-id again, at a.
    const delivery = await deliveryOf(eventId, a.id);
    const again = await request(
      stack,
      "POST",
      `/admin/webhooks/deliveries/${delivery!.id}/redeliver`,
      undefined,
      ADMIN(),
    );
    expect(again.status).toBe(202);
    await receiver.waitForRequests(2, "/scope-a", 20_000);
    expect(postsTo("/scope-a").map((p) => p.headers["webhook-id"])).toEqual([eventId, eventId]);

    // a's delivery failed (say its receiver was down): recover re-sends it, to a only.
    await waitFor(async () => (await deliveryOf(eventId, a.id))?.status === "delivered", 10_000);
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE endpoint_id = ANY($1)",
      [[a.id, b.id]],
    );
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const recovered = await request(
      stack,
      "POST",
      `/admin/webhooks/endpoints/${a.id}/recover`,
      { since },
      ADMIN(),
    );
    expect(recovered).toMatchObject({ status: 202, body: { recovered: 1, retrying: 0, more: false } });
    await receiver.waitForRequests(3, "/scope-a", 20_000);
    await waitFor(async () => (await deliveryOf(eventId, a.id))?.status === "delivered", 10_000);
    expect(postsTo("/scope-a").map((p) => p.headers["webhook-id"])).toEqual([eventId, eventId, eventId]);
    expect(postsTo("/scope-b")).toHaveLength(1);
  });

  it("need the admin token, and answer 404, 409 and 400 as the error envelope", async () => {
    const off = await createEndpoint({ url: receiver.url("/off"), scope: null, enabled: false });
    const unauthorized = await request(stack, "POST", `/admin/webhooks/endpoints/${off.id}/test`);
    expect(unauthorized.status).toBe(401);
    const disabled = await request(
      stack,
      "POST",
      `/admin/webhooks/endpoints/${off.id}/test`,
      undefined,
      ADMIN(),
    );
    expect(disabled.status).toBe(409);
    expect(disabled.body.error).toMatchObject({
      code: "CONFLICT",
      message: expect.stringContaining("enable it first"),
    });
    const unknown = await request(
      stack,
      "POST",
      `/admin/webhooks/deliveries/${crypto.randomUUID()}/redeliver`,
      undefined,
      ADMIN(),
    );
    expect(unknown.status).toBe(404);
    const badSince = await request(
      stack,
      "POST",
      `/admin/webhooks/endpoints/${off.id}/recover`,
      { since: "yesterday" },
      ADMIN(),
    );
    expect(badSince.status).toBe(400);
    expect(badSince.body.error.issues).toEqual([
      { path: "since", message: "must be an ISO 8601 time with its offset, e.g. 2026-01-31T12:00:00Z" },
    ]);
    // No time at all is said to be required, not to be a malformed one.
    const noSince = await request(stack, "POST", `/admin/webhooks/endpoints/${off.id}/recover`, {}, ADMIN());
    expect(noSince.status).toBe(400);
    expect(noSince.body.error.message).toBe(
      "invalid body: since: is required: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z",
    );
    expect(noSince.body.error.issues).toEqual([
      { path: "since", message: "is required: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z" },
    ]);
    expect(postsTo("/off")).toHaveLength(0);
  });
});

describe("the deliver job route", () => {
  const path = "/jobs/webhook.deliver";
  const sign = (body: string, url = `${stack.url}${path}`) =>
    signJwt({ key: stack.qstash.currentSigningKey, url, body: Buffer.from(body) });

  it("verifies QStash's signature first, refuses a malformed job for good, and answers a held lease with Retry-After", async () => {
    const body = JSON.stringify({ deliveryId: crypto.randomUUID() });
    const unsigned = await request(stack, "POST", path, body);
    expect(unsigned.status).toBe(401);
    const misaddressed = await request(stack, "POST", path, body, {
      "Upstash-Signature": sign(body, `${stack.url}/jobs/webhook.fanout`),
    });
    expect(misaddressed.status).toBe(401);
    const garbage = JSON.stringify({ hello: "world" });
    const malformed = await request(stack, "POST", path, garbage, { "Upstash-Signature": sign(garbage) });
    expect(malformed.status).toBe(489);
    expect(malformed.headers.get("upstash-nonretryable-error")).toBe("true");
    // Another delivery of the job holds the lease: QStash is told to come back once it has expired.
    const endpoint = await createEndpoint({ url: receiver.url("/leased"), scope: "leased" });
    receiver.state.respond = () => ({ status: 200 });
    const { eventId } = await createNote("leased");
    await waitFor(async () => (await deliveryOf(eventId, endpoint.id))?.status === "delivered", 20_000);
    const leased = await deliveryOf(eventId, endpoint.id);
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'pending', lease_until = now() + interval '40 seconds' WHERE id = $1",
      [leased!.id],
    );
    const job = JSON.stringify({ deliveryId: leased!.id });
    const busy = await request(stack, "POST", path, job, { "Upstash-Signature": sign(job) });
    expect(busy.status).toBe(409);
    expect(Number(busy.headers.get("retry-after"))).toBeGreaterThan(30);
    expect(Number(busy.headers.get("retry-after"))).toBeLessThanOrEqual(40);
    expect(postsTo("/leased")).toHaveLength(1);
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'delivered', lease_until = NULL WHERE id = $1",
      [leased!.id],
    );
    const done = await request(stack, "POST", path, job, { "Upstash-Signature": sign(job) });
    expect(done).toMatchObject({
      status: 200,
      body: { ok: true, outcome: { kind: "settled", status: "delivered" } },
    });
    expect(postsTo("/leased")).toHaveLength(1);

    // A delivery that no longer exists (its endpoint was deleted) is acknowledged, not retried.
    const gone = await request(stack, "POST", path, body, { "Upstash-Signature": sign(body) });
    expect(gone).toMatchObject({
      status: 200,
      body: { ok: true, outcome: { kind: "settled", status: "missing" } },
    });

    // A job a redeliver replaced (the row names another message) is told to stop, unsent.
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'pending', message_id = 'msg_the_new_job' WHERE id = $1",
      [leased!.id],
    );
    const replaced = await request(stack, "POST", path, job, {
      "Upstash-Signature": sign(job),
      "Upstash-Message-Id": "msg_the_old_job",
    });
    expect(replaced).toMatchObject({
      status: 200,
      body: { ok: true, outcome: { kind: "settled", status: "superseded" } },
    });
    expect(postsTo("/leased")).toHaveLength(1);
    const carried = await request(stack, "POST", path, job, {
      "Upstash-Signature": sign(job),
      "Upstash-Message-Id": "msg_the_new_job",
    });
    expect(carried).toMatchObject({ status: 200, body: { outcome: { kind: "delivered" } } });
    expect(postsTo("/leased")).toHaveLength(2);
  });
});
