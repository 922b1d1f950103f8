import { QstashError } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { DedupStore } from "../../infra/qstash-dev/dedup.ts";
import { useQStashDev } from "./harness.ts";

const t = useQStashDev();

describe("publish through the real @upstash/qstash Client", () => {
  it("publishJSON delivers the body, forwarded headers and QStash's delivery headers", async () => {
    const { client, dev, receiver } = t;
    const res = await client.publishJSON({
      url: receiver.url("/hook?tenant=7"),
      body: { hello: "world" },
      headers: { "X-Trace": "abc" },
    });
    expect(res.messageId).toMatch(/^msg_/);
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.state).toBe("DELIVERED");
    const [got] = await receiver.waitForRequests(1);
    expect(got!.path).toBe("/hook?tenant=7");
    expect(JSON.parse(got!.body)).toEqual({ hello: "world" });
    expect(got!.headers["x-trace"]).toBe("abc"); // Upstash-Forward-X-Trace, prefix stripped
    expect(got!.headers["content-type"]).toBe("application/json");
    expect(got!.headers["upstash-message-id"]).toBe(res.messageId);
    expect(got!.headers["upstash-retried"]).toBe("0");
    expect(got!.headers["user-agent"]).toBe("Upstash-QStash");
    expect(got!.headers["upstash-forward-x-trace"]).toBeUndefined();
  });

  it("honours Upstash-Method", async () => {
    const { client, dev, receiver } = t;
    const res = await client.publish({ url: receiver.url("/put"), body: "x", method: "PUT" });
    await dev.waitForSettled(res.messageId);
    expect(receiver.received[0]!.method).toBe("PUT");
  });

  it("batchJSON answers one {messageId} per entry and delivers each", async () => {
    const { client, dev, receiver } = t;
    const res = await client.batchJSON([
      { url: receiver.url("/a"), body: { n: 1 } },
      { url: receiver.url("/b"), body: { n: 2 } },
    ]);
    expect(res).toHaveLength(2);
    const ids = res.map((r) => ("messageId" in r ? r.messageId : undefined));
    expect(new Set(ids).size).toBe(2);
    await dev.waitFor((ms) => ms.filter((m) => m.state === "DELIVERED").length === 2 || undefined);
    expect(receiver.received.map((r) => [r.path, r.body]).sort()).toEqual([
      ["/a", '{"n":1}'],
      ["/b", '{"n":2}'],
    ]);
  });

  it("deduplicates by Upstash-Deduplication-Id: same messageId, deduplicated: true, one delivery", async () => {
    const { client, dev, receiver } = t;
    const first = await client.publishJSON({
      url: receiver.url("/d"),
      body: { a: 1 },
      deduplicationId: "evt-1",
    });
    const second = await client.publishJSON({
      url: receiver.url("/d"),
      body: { a: 2 },
      deduplicationId: "evt-1",
    });
    expect(first).not.toHaveProperty("deduplicated");
    expect(second).toMatchObject({ messageId: first.messageId, deduplicated: true });
    const other = await client.publishJSON({
      url: receiver.url("/d"),
      body: { a: 1 },
      deduplicationId: "evt-2",
    });
    expect(other.messageId).not.toBe(first.messageId);
    await dev.waitFor((ms) => ms.filter((m) => m.state === "DELIVERED").length === 2 || undefined);
    expect(dev.messages()).toHaveLength(2);
  });

  it("deduplicates by content (destination + body + headers) and within a batch", async () => {
    const { client, receiver } = t;
    const a = await client.publishJSON({
      url: receiver.url("/c"),
      body: { x: 1 },
      contentBasedDeduplication: true,
    });
    const b = await client.publishJSON({
      url: receiver.url("/c"),
      body: { x: 1 },
      contentBasedDeduplication: true,
    });
    const otherBody = await client.publishJSON({
      url: receiver.url("/c"),
      body: { x: 2 },
      contentBasedDeduplication: true,
    });
    const otherUrl = await client.publishJSON({
      url: receiver.url("/c2"),
      body: { x: 1 },
      contentBasedDeduplication: true,
    });
    expect(b).toMatchObject({ messageId: a.messageId, deduplicated: true });
    expect(otherBody.messageId).not.toBe(a.messageId);
    expect(otherUrl.messageId).not.toBe(a.messageId);

    const batch = await client.batchJSON([
      { url: receiver.url("/batch"), body: 1, deduplicationId: "same" },
      { url: receiver.url("/batch"), body: 1, deduplicationId: "same" },
    ]);
    expect(batch[1]).toMatchObject({
      messageId: (batch[0] as { messageId: string }).messageId,
      deduplicated: true,
    });
  });

  it("forgets deduplication keys once the window has passed", () => {
    // The store takes the clock as an argument, so the window is checked without waiting.
    const store = new DedupStore(10 * 60_000);
    store.remember(["id:w"], "msg_1", 1_000);
    expect(store.find(["id:w"], 1_000 + 10 * 60_000 - 1)).toBe("msg_1");
    expect(store.find(["id:w"], 1_000 + 10 * 60_000)).toBeUndefined();
    expect(store.find(["id:other"], 1_000)).toBeUndefined();
  });

  it("GET /v2/messages/<id> reports state through client.messages.get", async () => {
    const { client, dev, receiver } = t;
    dev.pauseDelivery();
    const res = await client.publishJSON({ url: receiver.url("/m"), body: {} });
    // The SDK's Message type has no `state`; the server reports it anyway.
    expect(await client.messages.get(res.messageId)).toMatchObject({ state: "CREATED" });
    dev.resumeDelivery();
    await dev.waitForSettled(res.messageId);
    const message = await client.messages.get(res.messageId);
    expect(message).toMatchObject({ messageId: res.messageId, url: receiver.url("/m"), state: "DELIVERED" });
    await expect(client.messages.get("msg_missing")).rejects.toMatchObject({ status: 404 });
  });

  it("Upstash-Delay holds delivery (time-scaled) and records notBefore", async () => {
    const { client, dev, receiver } = t;
    const before = Date.now();
    const res = await client.publishJSON({ url: receiver.url("/late"), body: {}, delay: 100 }); // 100 s → 100 ms
    const [got] = await receiver.waitForRequests(1, "/late");
    expect(got!.at - before).toBeGreaterThanOrEqual(100);
    const message = await client.messages.get(res.messageId);
    expect(message.notBefore! - message.createdAt).toBe(100_000);
    expect(dev.message(res.messageId)!.state).toBe("DELIVERED");
  });
});

describe("auth", () => {
  it("answers 401 JSON without a valid token, and accepts ?qstash_token=", async () => {
    const { dev, receiver } = t;
    const target = `${dev.url}/v2/publish/${receiver.url("/auth")}`;
    const attempts: Record<string, string>[] = [
      {},
      { authorization: "Bearer wrong" },
      { authorization: dev.token },
    ];
    for (const headers of attempts) {
      const res = await fetch(target, { method: "POST", headers, body: "x" });
      expect(res.status).toBe(401);
      expect(await res.json()).toHaveProperty("error");
    }
    const ok = await fetch(`${target}?qstash_token=${dev.token}`, { method: "POST", body: "x" });
    expect(ok.status).toBe(201);
    const { messageId } = (await ok.json()) as { messageId: string };
    await dev.waitForSettled(messageId);
    // The token is ours, not the destination's: it must not be forwarded in the URL.
    expect(receiver.received[0]!.path).toBe("/auth");
    expect(dev.messages()).toHaveLength(1);
  });

  it("the Client with a wrong token throws QstashError with status 401", async () => {
    const { Client } = await import("@upstash/qstash");
    const bad = new Client({ baseUrl: t.dev.url, token: "nope", devMode: false, enableTelemetry: false });
    const error = await bad.publishJSON({ url: t.receiver.url("/x"), body: {} }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QstashError);
    expect((error as QstashError).status).toBe(401);
  });
});

describe("bad requests get QStash-style 4xx JSON errors", () => {
  const call = (path: string, init: RequestInit = {}) =>
    fetch(`${t.dev.url}${path}`, {
      method: "POST",
      ...init,
      headers: { authorization: `Bearer ${t.dev.token}`, ...init.headers },
    });

  it.each([
    ["malformed destination", "/v2/publish/not-a-url", {}, 400],
    ["ftp destination", "/v2/publish/ftp://example.com/x", {}, 400],
    ["bad Upstash-Delay", "/v2/publish/http://127.0.0.1:1/x", { headers: { "upstash-delay": "soon" } }, 400],
    [
      "bad Upstash-Retries",
      "/v2/publish/http://127.0.0.1:1/x",
      { headers: { "upstash-retries": "-1" } },
      400,
    ],
    [
      "bad Upstash-Callback",
      "/v2/publish/http://127.0.0.1:1/x",
      { headers: { "upstash-callback": "nope" } },
      400,
    ],
    ["batch that is not JSON", "/v2/batch", { body: "[{" }, 400],
    ["batch that is not an array", "/v2/batch", { body: '{"destination":"http://127.0.0.1:1"}' }, 400],
    ["batch entry without destination", "/v2/batch", { body: '[{"body":"x"}]' }, 400],
    ["batch entry with a bad destination", "/v2/batch", { body: '[{"destination":"nope"}]' }, 400],
    ["body over 1 MB", "/v2/publish/http://127.0.0.1:1/x", { body: "x".repeat(1024 * 1024 + 1) }, 413],
    ["unknown route", "/v2/nothing-here", {}, 404],
    ["unknown top-level route", "/favicon.ico", {}, 404],
    ["wrong method", "/v2/batch", { method: "GET" }, 405],
  ] as const)("%s", async (_name, path, init, status) => {
    const res = await call(path, init as RequestInit);
    expect(res.status).toBe(status);
    expect(await res.json()).toEqual({ error: expect.any(String) });
    // Nothing was enqueued, and the server is still serving.
    expect(t.dev.messages()).toHaveLength(0);
    const alive = await call(`/v2/publish/${t.receiver.url("/alive")}`, { body: "x" });
    expect(alive.status).toBe(201);
  });

  it("a body of exactly 1 MB is accepted", async () => {
    const res = await call(`/v2/publish/${t.receiver.url("/big")}`, { body: "x".repeat(1024 * 1024) });
    expect(res.status).toBe(201);
  });
});

describe("fault injection", () => {
  it("failNextPublishes(n, status) makes the Client throw QstashError with that status n times", async () => {
    const { client, dev, receiver } = t;
    dev.failNextPublishes(2, 503);
    for (let i = 0; i < 2; i++) {
      const error = await client.publishJSON({ url: receiver.url("/f"), body: {} }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(QstashError);
      expect((error as QstashError).status).toBe(503);
    }
    expect(dev.messages()).toHaveLength(0);
    const ok = await client.publishJSON({ url: receiver.url("/f"), body: {} });
    expect(ok.messageId).toMatch(/^msg_/);
  });

  it("the admin path does the same over HTTP, token-protected", async () => {
    const { client, dev, receiver } = t;
    const admin = (path: string, body: unknown, token = dev.token) =>
      fetch(`${dev.url}/__admin${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    expect((await admin("/fail-publishes", { count: 1, status: 500 }, "wrong")).status).toBe(401);
    expect((await admin("/fail-publishes", { count: 1, status: 429 })).status).toBe(200);
    await expect(client.batchJSON([{ url: receiver.url("/f"), body: 1 }])).rejects.toMatchObject({
      status: 429,
    });
    expect((await admin("/pause", {})).status).toBe(200);
    const res = await client.publishJSON({ url: receiver.url("/f"), body: {} });
    const listed = (await (
      await fetch(`${dev.url}/__admin/messages`, { headers: { authorization: `Bearer ${dev.token}` } })
    ).json()) as { paused: boolean; messages: { messageId: string; state: string }[] };
    expect(listed).toMatchObject({
      paused: true,
      messages: [{ messageId: res.messageId, state: "CREATED" }],
    });
    expect((await admin("/resume", {})).status).toBe(200);
    await dev.waitForSettled(res.messageId);
    expect((await admin("/reset", {})).status).toBe(200);
    expect(dev.messages()).toHaveLength(0);
  });

  it("setPublishLatency delays publish answers", async () => {
    const { client, dev, receiver } = t;
    dev.setPublishLatency(150);
    const start = Date.now();
    await client.publishJSON({ url: receiver.url("/slow"), body: {} });
    expect(Date.now() - start).toBeGreaterThanOrEqual(150);
    dev.setPublishLatency(0);
  });
});
