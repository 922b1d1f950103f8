import { randomUUID } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../support/api-keys.ts";
import { signJwt } from "../../infra/qstash-dev/server.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";
import { request, useWorkerd } from "../support/workerd.ts";

// The subscriber side in workerd: signature checks on /jobs routes, the
// notify.mail handler's once-only send, the failure callback, operator routes.
const t = useTestDatabase();
const stack = useWorkerd(t);
const ADMIN = () => ({ Authorization: `Bearer ${stack.env.ADMIN_TOKEN}` });
let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});
/** A tenant's headers: the domain routes take an API key. */
const TENANT = (headers: Record<string, string> = {}) => ({ Authorization: `Bearer ${key}`, ...headers });

function jobBody(subscription: string, overrides: Record<string, unknown> = {}) {
  return JSON.stringify({
    subscription,
    event: {
      id: randomUUID(),
      seq: 1,
      type: "audit.checked",
      subject: "s-1",
      scope: null,
      payload: {},
      createdAt: new Date().toISOString(),
    },
    coalesced: [],
    ...overrides,
  });
}

/** Posts a body to a /jobs route, signed as QStash would (or not, or wrongly). */
function deliver(path: string, body: string, signature: string | null, headers: Record<string, string> = {}) {
  return request(stack, "POST", path, body, {
    ...(signature === null ? {} : { "Upstash-Signature": signature }),
    "Upstash-Message-Id": "msg_test",
    ...headers,
  });
}
const sign = (path: string, body: string, options: { key?: string; now?: number } = {}) =>
  signJwt({
    key: options.key ?? stack.qstash.currentSigningKey,
    url: `${stack.url}${path}`,
    body: Buffer.from(body),
    ...(options.now === undefined ? {} : { now: options.now }),
  });

describe("signed job routes", () => {
  it("accepts a job signed with the current or the next key", async () => {
    const body = jobBody("webhook.fanout");
    const current = await deliver("/jobs/webhook.fanout", body, sign("/jobs/webhook.fanout", body));
    expect(current).toMatchObject({ status: 200, body: { ok: true } });
    const next = await deliver(
      "/jobs/webhook.fanout",
      body,
      sign("/jobs/webhook.fanout", body, { key: stack.qstash.nextSigningKey }),
    );
    expect(next.status).toBe(200);
  });

  it("rejects missing, forged, expired, tampered and misaddressed signatures with 401", async () => {
    const path = "/jobs/webhook.fanout";
    const body = jobBody("webhook.fanout");
    const cases = {
      missing: null,
      forged: sign(path, body, { key: "sig_not_the_real_key" }),
      expired: sign(path, body, { now: Math.floor(Date.now() / 1000) - 600 }),
      tampered: sign(path, jobBody("webhook.fanout")),
      misaddressed: sign("/jobs/notify.mail", body),
      garbage: "not.a.jwt",
    };
    for (const [name, signature] of Object.entries(cases)) {
      const res = await deliver(path, body, signature);
      expect({ name, status: res.status, code: res.body.error?.code }).toEqual({
        name,
        status: 401,
        code: "UNAUTHORIZED",
      });
      expect(res.body.error.requestId).toEqual(expect.any(String));
    }
  });

  it("checks the signature before the subscription: unknown is 401 unsigned, 404 signed", async () => {
    const body = jobBody("no.such");
    expect((await deliver("/jobs/no.such", body, null)).status).toBe(401);
    const signed = await deliver("/jobs/no.such", body, sign("/jobs/no.such", body));
    expect(signed.status).toBe(404);
    expect(signed.body.error.code).toBe("NOT_FOUND");
  });

  it("a signed but malformed job is 489, never retried", async () => {
    const body = JSON.stringify({ hello: "world" });
    const res = await deliver("/jobs/corpus.index", body, sign("/jobs/corpus.index", body));
    expect(res.status).toBe(489);
    expect(res.headers.get("upstash-nonretryable-error")).toBe("true");
    expect(res.body.error).toMatchObject({ code: "job_rejected", requestId: expect.any(String) });
  });

  it("a signed failure callback that is not QStash's shape is 489, never retried", async () => {
    const body = JSON.stringify({ url: 7 });
    const res = await deliver("/jobs/_failed", body, sign("/jobs/_failed", body));
    expect(res.status).toBe(489);
    expect(res.headers.get("upstash-nonretryable-error")).toBe("true");
    expect(res.body.error).toMatchObject({
      code: "job_rejected",
      requestId: res.headers.get("x-request-id"),
    });
  });
});

describe("a slow mail provider", () => {
  it("holds back only notify.mail's jobs: a note written meanwhile is indexed at once", async () => {
    // The mail API holds every answer 9 s; the mailer would give up at 10.
    stack.sink.respondWith({ status: 200, body: { id: "held" }, delayMs: 9_000 });
    const held = () => stack.sink.received({ path: "/mail" }).filter((r) => r.delayMs !== undefined);
    try {
      // More mail jobs than one subscription's budget (20), published by one sweep.
      await t.pool.query(
        `INSERT INTO events (type, subject, payload)
         SELECT 'supplier.created', 'held-' || n, jsonb_build_object('name', 'Held ' || n, 'status', 'active')
           FROM generate_series(1, 25) AS n`,
      );
      expect((await stack.fetch("/__scheduled?cron=*+*+*+*+*")).status).toBe(200);
      await waitFor(() => held().length >= 20, 15_000);

      const started = Date.now();
      const note = await request(
        stack,
        "POST",
        "/notes",
        { title: "Indexed meanwhile" },
        TENANT({ Prefer: "wait=5" }),
      );
      expect(note.status).toBe(201);
      const indexed = await stack.qstash.waitForSettled(note.body.events[0].fanout["corpus.index"].messageId);
      expect(indexed.state).toBe("DELIVERED");
      // With one budget for every subscription, the held mails took all of it and the
      // note's job waited for them (9 s).
      expect(Date.now() - started).toBeLessThan(6_000);
      // And notify.mail is held to its own: no more of its jobs started.
      expect(held()).toHaveLength(20);
    } finally {
      stack.sink.respondWith(null);
    }
  }, 60_000);
});

describe("notify.mail", () => {
  it("a job delivered twice sends one mail", async () => {
    const created = await request(
      stack,
      "POST",
      "/suppliers",
      { name: "Mailed Ltd" },
      TENANT({ Prefer: "wait=5" }),
    );
    expect(created.status).toBe(201);
    const event = created.body.events[0];
    const messageId: string = event.fanout["notify.mail"].messageId;
    const settled = await stack.qstash.waitForSettled(messageId);
    expect(settled.state).toBe("DELIVERED");
    const mail = await stack.sink.waitFor((r) => r.headers["idempotency-key"] === `notify.mail:${event.id}`);
    expect(mail.json).toMatchObject({ subject: expect.stringContaining("Mailed Ltd") });

    // QStash redelivers the very same job (e.g. our 200 was lost): same bytes, fresh signature.
    const again = await deliver("/jobs/notify.mail", settled.body, sign("/jobs/notify.mail", settled.body), {
      "Upstash-Message-Id": messageId,
      "Upstash-Retried": "1",
    });
    expect(again).toMatchObject({ status: 200, body: { ok: true } });
    expect(
      stack.sink.received().filter((r) => r.headers["idempotency-key"] === `notify.mail:${event.id}`),
    ).toHaveLength(1);
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM mail_sends WHERE event_id = $1", [
      event.id,
    ]);
    expect(rows[0].n).toBe(1);
  });
});

describe("failure callback", () => {
  it("a job that can never succeed is recorded as a job failure with an alert, once", async () => {
    // The mail API rejects the mail: the handler answers 489, QStash dead-letters
    // the job and calls the failure callback, signed, at /jobs/_failed.
    stack.sink.respondWith({ status: 422, body: { error: "mailbox does not exist" } });
    try {
      const created = await request(
        stack,
        "POST",
        "/suppliers",
        { name: "Bounced Ltd" },
        TENANT({ Prefer: "wait=5" }),
      );
      const event = created.body.events[0];
      const messageId: string = event.fanout["notify.mail"].messageId;
      expect((await stack.qstash.waitForSettled(messageId)).state).toBe("ERROR");

      await waitFor(async () => {
        const { rows } = await t.pool.query("SELECT 1 FROM job_failures WHERE message_id = $1", [messageId]);
        return rows.length === 1;
      }, 10_000);
      const failures = await request(stack, "GET", "/admin/job-failures", undefined, ADMIN());
      expect(failures.status).toBe(200);
      expect(failures.body.jobFailures).toEqual([
        expect.objectContaining({ messageId, subscription: "notify.mail", eventId: event.id, status: 489 }),
      ]);
      const alerts = await request(stack, "GET", "/admin/alerts?open=true", undefined, ADMIN());
      expect(alerts.body.alerts).toEqual([
        expect.objectContaining({ kind: "job.failed", eventId: event.id, subscription: "notify.mail" }),
      ]);
      // The event itself lists its failed job, whichever event the subscription's alert names.
      const shown = await request(stack, "GET", `/admin/events/${event.id}`, undefined, ADMIN());
      expect(shown.body.event.jobFailures).toEqual([
        expect.objectContaining({ messageId, subscription: "notify.mail", retriedAt: null }),
      ]);

      // Delivered again (callbacks are at least once): nothing new.
      const callback = stack.qstash
        .messages()
        .find((m) => m.kind === "failure-callback" && m.body.includes(messageId))!;
      const repeat = await deliver("/jobs/_failed", callback.body, sign("/jobs/_failed", callback.body));
      expect(repeat).toMatchObject({ status: 200, body: { ok: true, recorded: false } });
      const { rows } = await t.pool.query(
        "SELECT count(*)::int AS n FROM outbox_alerts WHERE kind = 'job.failed'",
      );
      expect(rows[0].n).toBe(1);

      // Signed for another URL, the callback is refused.
      const misaddressed = await deliver(
        "/jobs/_failed",
        callback.body,
        sign("/jobs/notify.mail", callback.body),
      );
      expect(misaddressed.status).toBe(401);
    } finally {
      stack.sink.respondWith(null);
    }
  });
});

describe("operator routes", () => {
  it("need the admin bearer token", async () => {
    const attempts: Record<string, string>[] = [{}, { Authorization: "Bearer wrong-token-wrong-token" }];
    for (const headers of attempts) {
      const res = await request(stack, "GET", "/admin/stats", undefined, headers);
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer /);
      expect(res.body.error).toMatchObject({ code: "UNAUTHORIZED", requestId: expect.any(String) });
    }
    // RFC 6750 §3.1: another scheme's credentials are an unsupported method, answered
    // as none (401, a plain challenge); only a malformed Bearer header is a 400.
    const basic = await request(stack, "GET", "/admin/stats", undefined, { Authorization: "Basic eDp5" });
    expect(basic.status).toBe(401);
    expect(basic.headers.get("www-authenticate")).toBe('Bearer realm="edge-outbox operators"');
    expect(basic.body.error).toMatchObject({
      code: "UNAUTHORIZED",
      message: expect.stringContaining("scheme is not Bearer"),
    });
    const malformed = await request(stack, "GET", "/admin/stats", undefined, { Authorization: "Bearer" });
    expect(malformed.status).toBe(400);
    const ok = await request(stack, "GET", "/admin/stats", undefined, ADMIN());
    expect(ok.status).toBe(200);
    expect(ok.body.stats).toMatchObject({ backlog: expect.any(Number), relay: expect.any(Object) });
  });

  it("list and show events, and requeue a poisoned one", async () => {
    const created = await request(
      stack,
      "POST",
      "/suppliers",
      { name: "Listed Ltd" },
      TENANT({ Prefer: "wait=5" }),
    );
    const id: string = created.body.events[0].id;
    const listed = await request(
      stack,
      "GET",
      "/admin/events?type=supplier.*&state=fanned&limit=5",
      undefined,
      ADMIN(),
    );
    expect(listed.status).toBe(200);
    expect(listed.body.events.map((e: { id: string }) => e.id)).toContain(id);
    const shown = await request(stack, "GET", `/admin/events/${id}`, undefined, ADMIN());
    expect(shown.body.event).toMatchObject({ id, state: "fanned", payload: { name: "Listed Ltd" } });

    const { rows } = await t.pool.query(
      "INSERT INTO events (type, subject, poisoned_at, attempts, last_error) VALUES ('audit.broken', 'x', now(), 5, 'boom') RETURNING id",
    );
    const poisoned: string = rows[0].id;
    const requeued = await request(stack, "POST", "/admin/events/requeue", { ids: [poisoned, id] }, ADMIN());
    expect(requeued.status).toBe(200);
    expect(requeued.body).toEqual({ requeued: [poisoned], notPoisoned: [id], unknown: [] });

    const bad = await request(stack, "POST", "/admin/events/requeue", { ids: ["nope"] }, ADMIN());
    expect(bad.status).toBe(400);
    expect(bad.body.error.issues).toEqual([expect.objectContaining({ path: "ids.0" })]);
  });
});
