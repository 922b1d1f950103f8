import { Receiver } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { startQStashDev } from "../../infra/qstash-dev/server.ts";
import { startReceiver } from "./receiver.ts";
import { useQStashDev } from "./harness.ts";

const t = useQStashDev({ currentSigningKey: "sig_cur", nextSigningKey: "sig_next" });
const auth = () => ({ authorization: `Bearer ${t.dev.token}` });
const receiverKeys = new Receiver({ currentSigningKey: "sig_cur", nextSigningKey: "sig_next" });

describe("retries", () => {
  it("retries non-2xx with increasing Upstash-Retried and QStash's backoff, then delivers", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = () => (++calls <= 2 ? { status: 500, body: "boom" } : { status: 200 });
    const res = await client.publishJSON({ url: receiver.url("/flaky"), body: {}, retries: 3 });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.state).toBe("DELIVERED");
    expect(receiver.received.map((r) => r.headers["upstash-retried"])).toEqual(["0", "1", "2"]);
    expect(new Set(receiver.received.map((r) => r.headers["upstash-message-id"]))).toEqual(
      new Set([res.messageId]),
    );
    expect(settled.attempts.map((a) => a.status)).toEqual([500, 500, 200]);
    // min(86400, e^(2.5·n)) seconds for the n-th retry (retry docs' table: 12 s, 2m28s).
    expect(settled.attempts.map((a) => a.nextRetryDelayMs)).toEqual([
      Math.exp(2.5) * 1000,
      Math.exp(5) * 1000,
      undefined,
    ]);
    // Time-scaled, but still in order and spaced at least the scaled delay apart.
    const [a, b, c] = receiver.received.map((r) => r.at);
    expect(b! - a!).toBeGreaterThanOrEqual(Math.floor(Math.exp(2.5)));
    expect(c! - b!).toBeGreaterThanOrEqual(Math.floor(Math.exp(5)));
  });

  it("treats a timeout as a failure and retries", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = () =>
      ++calls === 1
        ? new Promise((resolve) => setTimeout(() => resolve({ status: 200 }), 1_500))
        : { status: 200 };
    const res = await client.publishJSON({ url: receiver.url("/slow"), body: {}, timeout: "200ms" as never });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.attempts[0]).toMatchObject({
      status: undefined,
      error: expect.stringMatching(/timed out/),
    });
    expect(settled.attempts[1]).toMatchObject({ retried: 1, status: 200 });
  });

  it("honours Retry-After from the destination instead of the backoff", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = () =>
      ++calls === 1 ? { status: 429, headers: { "Retry-After": "1m" } } : { status: 200 };
    const res = await client.publishJSON({ url: receiver.url("/rate"), body: {} });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.attempts[0]).toMatchObject({
      nextRetryDelayMs: 60_000,
      nextRetryDelaySource: "retry-after",
    });
    const [first, second] = receiver.received;
    // 60 s scaled by 0.001 = 60 ms, well above the 12 ms the backoff would have chosen.
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(60);
  });

  it("ignores a Retry-After beyond one day and uses the backoff", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = () =>
      ++calls === 1 ? { status: 503, headers: { "Retry-After": String(2 * 86_400) } } : { status: 200 };
    const res = await client.publishJSON({ url: receiver.url("/far"), body: {} });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.attempts[0]).toMatchObject({ nextRetryDelaySource: "backoff" });
  });

  it("489 with Upstash-NonRetryable-Error goes straight to the DLQ", async () => {
    const { client, dev, receiver } = t;
    receiver.state.respond = () => ({
      status: 489,
      headers: { "Upstash-NonRetryable-Error": "true" },
      body: "bad payload",
    });
    const res = await client.publishJSON({ url: receiver.url("/poison"), body: { p: 1 }, retries: 3 });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled).toMatchObject({ state: "ERROR", dlqId: expect.any(String) });
    expect(settled.attempts).toHaveLength(1);
    const { messages } = await client.dlq.listMessages();
    expect(messages).toEqual([
      expect.objectContaining({ messageId: res.messageId, dlqId: settled.dlqId, responseStatus: 489 }),
    ]);
    expect(messages[0]!.responseBody).toBe("bad payload");
  });

  it("489 without the header is an ordinary failure and is retried", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = () => (++calls === 1 ? { status: 489 } : { status: 200 });
    const res = await client.publishJSON({ url: receiver.url("/489"), body: {} });
    expect((await dev.waitForSettled(res.messageId)).state).toBe("DELIVERED");
    expect(calls).toBe(2);
  });
});

describe("DLQ", () => {
  async function exhaust(path: string) {
    t.receiver.state.respond = () => ({ status: 500, body: "down" });
    const res = await t.client.publishJSON({ url: t.receiver.url(path), body: { k: path }, retries: 1 });
    const settled = await t.dev.waitForSettled(res.messageId);
    expect(settled.state).toBe("ERROR");
    expect(settled.attempts).toHaveLength(2); // first try + 1 retry
    return { messageId: res.messageId, dlqId: settled.dlqId! };
  }

  it("lists, gets and deletes DLQ messages", async () => {
    const { client, dev } = t;
    const one = await exhaust("/dlq1");
    const two = await exhaust("/dlq2");
    const { messages } = await client.dlq.listMessages();
    expect(messages.map((m) => m.dlqId)).toEqual([one.dlqId, two.dlqId]);
    expect(messages[0]).toMatchObject({
      messageId: one.messageId,
      url: t.receiver.url("/dlq1"),
      method: "POST",
      body: '{"k":"/dlq1"}',
      maxRetries: 1,
      responseStatus: 500,
      responseBody: "down",
    });

    const get = await fetch(`${dev.url}/v2/dlq/${one.dlqId}`, { headers: auth() });
    expect(get.status).toBe(200);
    expect(await get.json()).toMatchObject({ dlqId: one.dlqId, messageId: one.messageId });

    await client.dlq.delete(one.dlqId);
    const gone = await fetch(`${dev.url}/v2/dlq/${one.dlqId}`, { headers: auth() });
    expect(gone.status).toBe(404);
    expect(await gone.json()).toEqual({ error: expect.any(String) });
    const del = await fetch(`${dev.url}/v2/dlq/${one.dlqId}`, { method: "DELETE", headers: auth() });
    expect(del.status).toBe(404);
    expect((await client.dlq.listMessages()).messages.map((m) => m.dlqId)).toEqual([two.dlqId]);
  });

  it("POST /v2/dlq/retry/<dlqId> republishes as a new message and removes the entry", async () => {
    const { dev, receiver, client } = t;
    const failed = await exhaust("/dlq-retry");
    receiver.state.respond = () => ({ status: 200 });
    const res = await fetch(`${dev.url}/v2/dlq/retry/${failed.dlqId}`, { method: "POST", headers: auth() });
    expect(res.status).toBe(200);
    const { messageId } = (await res.json()) as { messageId: string };
    expect(messageId).not.toBe(failed.messageId);
    const settled = await dev.waitForSettled(messageId);
    expect(settled).toMatchObject({
      state: "DELIVERED",
      url: receiver.url("/dlq-retry"),
      body: '{"k":"/dlq-retry"}',
    });
    expect((await client.dlq.listMessages()).messages).toEqual([]);
    const again = await fetch(`${dev.url}/v2/dlq/retry/${failed.dlqId}`, { method: "POST", headers: auth() });
    expect(again.status).toBe(404);
  });

  it("client.dlq.retry (the SDK's bulk form) retries with header overrides", async () => {
    const { dev, receiver, client } = t;
    const failed = await exhaust("/dlq-bulk");
    const result = await client.dlq.retry([failed.dlqId]);
    expect(result.responses).toHaveLength(1);
    const messageId = result.responses[0]!.messageId;
    // Still failing; the republished message keeps maxRetries 1 from the original.
    const settled = await dev.waitForSettled(messageId);
    expect(settled).toMatchObject({ state: "ERROR", maxRetries: 1 });
    const override = await fetch(`${dev.url}/v2/dlq/retry/${settled.dlqId}`, {
      method: "POST",
      headers: { ...auth(), "Upstash-Retries": "0" },
    });
    const { messageId: third } = (await override.json()) as { messageId: string };
    expect(await dev.waitForSettled(third)).toMatchObject({ state: "ERROR", maxRetries: 0, attempts: [{}] });
    expect(receiver.received.length).toBe(2 + 2 + 1);
  });
});

describe("callbacks", () => {
  it("exhausted retries call the failure callback with QStash's body, signed for the callback URL", async () => {
    const { client, dev, receiver } = t;
    receiver.state.respond = (r) =>
      r.path === "/failure-cb"
        ? { status: 200 }
        : { status: 503, headers: { "X-Why": "maintenance" }, body: "later" };
    const res = await client.publishJSON({
      url: receiver.url("/always-down"),
      body: { order: 1 },
      retries: 2,
      failureCallback: receiver.url("/failure-cb"),
      headers: { "X-Tenant": "t1" },
    });
    const [cb] = await receiver.waitForRequests(1, "/failure-cb");
    const source = dev.message(res.messageId)!;
    expect(source.state).toBe("ERROR");
    const body = JSON.parse(cb!.body) as Record<string, unknown>;
    expect(body).toMatchObject({
      status: 503,
      body: Buffer.from("later").toString("base64"),
      retried: 2,
      maxRetries: 2,
      dlqId: source.dlqId,
      sourceMessageId: res.messageId,
      url: receiver.url("/always-down"),
      method: "POST",
      sourceBody: Buffer.from('{"order":1}').toString("base64"),
      sourceHeader: { "X-Tenant": ["t1"], "Content-Type": ["application/json"] },
    });
    expect((body.header as Record<string, string[]>)["X-Why"]).toEqual(["maintenance"]);
    expect(Number(body.createdAt)).toBe(source.createdAt);
    await expect(
      receiverKeys.verify({
        signature: String(cb!.headers["upstash-signature"]),
        body: cb!.body,
        url: receiver.url("/failure-cb"),
      }),
    ).resolves.toBe(true);
    // The DLQ entry named in the callback is really there.
    const get = await fetch(`${dev.url}/v2/dlq/${String(body.dlqId)}`, { headers: auth() });
    expect(get.status).toBe(200);
  });

  it("Upstash-Callback receives the destination's response on success, signed", async () => {
    const { client, dev, receiver } = t;
    receiver.state.respond = (r) => (r.path === "/cb" ? { status: 200 } : { status: 200, body: "result-42" });
    const res = await client.publishJSON({
      url: receiver.url("/work"),
      body: {},
      callback: receiver.url("/cb"),
    });
    const [cb] = await receiver.waitForRequests(1, "/cb");
    const body = JSON.parse(cb!.body) as Record<string, unknown>;
    expect(body).toMatchObject({
      status: 200,
      body: Buffer.from("result-42").toString("base64"),
      retried: 0,
      sourceMessageId: res.messageId,
    });
    expect(body).not.toHaveProperty("dlqId");
    await expect(
      receiverKeys.verify({
        signature: String(cb!.headers["upstash-signature"]),
        body: cb!.body,
        url: receiver.url("/cb"),
      }),
    ).resolves.toBe(true);
    const callbackMessage = await dev.waitFor((ms) =>
      ms.find((m) => m.kind === "callback" && m.state === "DELIVERED"),
    );
    expect(callbackMessage.sourceMessageId).toBe(res.messageId);
  });
});

describe("flow control", () => {
  it("parallelism=1 delivers one at a time per key", async () => {
    const { client, dev, receiver } = t;
    // A slow destination: each request is held briefly so overlapping deliveries would show.
    receiver.state.respond = () => new Promise((resolve) => setTimeout(() => resolve({ status: 200 }), 25));
    const sent = await Promise.all(
      [1, 2, 3, 4, 5].map((n) =>
        client.publishJSON({
          url: receiver.url("/fc"),
          body: { n },
          flowControl: { key: "k1", parallelism: 1 },
        }),
      ),
    );
    await dev.waitFor((ms) =>
      sent.every((s) => ms.find((m) => m.messageId === s.messageId)?.state === "DELIVERED"),
    );
    expect(receiver.maxActive("/fc")).toBe(1);
  });

  it("without flow control (or across keys) deliveries overlap, so the measurement above can fail", async () => {
    const { client, dev, receiver } = t;
    const gate: (() => void)[] = [];
    receiver.state.respond = () => new Promise((resolve) => gate.push(() => resolve({ status: 200 })));
    const sent = await Promise.all(
      ["a", "b", "c"].map((key) =>
        client.publishJSON({ url: receiver.url("/fc2"), body: {}, flowControl: { key, parallelism: 1 } }),
      ),
    );
    // All three are in flight at once: three keys, one slot each.
    await receiver.waitForRequests(3, "/fc2");
    expect(receiver.maxActive("/fc2")).toBe(3);
    gate.forEach((open) => open());
    await dev.waitFor((ms) =>
      sent.every((s) => ms.find((m) => m.messageId === s.messageId)?.state === "DELIVERED"),
    );
  });

  it("a slow destination does not stall others", async () => {
    const { client, dev, receiver } = t;
    let release!: () => void;
    receiver.state.respond = (r) =>
      r.path === "/stuck"
        ? new Promise((resolve) => (release = () => resolve({ status: 200 })))
        : { status: 200 };
    const stuck = await client.publishJSON({ url: receiver.url("/stuck"), body: {} });
    await receiver.waitForRequests(1, "/stuck");
    const fast = await client.publishJSON({ url: receiver.url("/fast"), body: {} });
    expect((await dev.waitForSettled(fast.messageId)).state).toBe("DELIVERED");
    expect(dev.message(stuck.messageId)!.state).toBe("ACTIVE");
    release();
    await dev.waitForSettled(stuck.messageId);
  });
});

describe("pause and close", () => {
  it("pauseDelivery holds messages until resumeDelivery", async () => {
    const { client, dev, receiver } = t;
    dev.pauseDelivery();
    const res = await client.publishJSON({ url: receiver.url("/paused"), body: {} });
    // A second, already-delivered message proves time passed while the first stayed put.
    expect(dev.message(res.messageId)!.state).toBe("CREATED");
    dev.resumeDelivery();
    expect((await dev.waitForSettled(res.messageId)).state).toBe("DELIVERED");
    expect(receiver.received).toHaveLength(1);
  });

  it("close() cancels in-flight deliveries and resolves promptly", async () => {
    const dev = await startQStashDev({ timeScale: 0.001 });
    const hanging = await startReceiver();
    hanging.state.respond = () => new Promise(() => {}); // never answers
    try {
      const { Client } = await import("@upstash/qstash");
      const client = new Client({
        baseUrl: dev.url,
        token: dev.token,
        devMode: false,
        enableTelemetry: false,
      });
      await client.publishJSON({ url: hanging.url("/hang"), body: {} });
      await hanging.waitForRequests(1);
      const start = Date.now();
      await dev.close();
      expect(Date.now() - start).toBeLessThan(1_000);
      await expect(fetch(`${dev.url}/v2/dlq`)).rejects.toThrow();
    } finally {
      await dev.close();
      await hanging.close();
    }
  });
});
