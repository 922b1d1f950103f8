import { Client, Receiver } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { startReceiver } from "./receiver.ts";
import { useQStashDev } from "./harness.ts";

const t = useQStashDev({ currentSigningKey: "sig_cur", nextSigningKey: "sig_next" });
const auth = () => ({ authorization: `Bearer ${t.dev.token}` });
/** The real SDK against a dev server a test started itself. */
const sdkClient = (dev: QStashDev) =>
  new Client({ baseUrl: dev.url, token: dev.token, devMode: false, enableTelemetry: false });
const receiverKeys = new Receiver({ currentSigningKey: "sig_cur", nextSigningKey: "sig_next" });

describe("the delivery log", () => {
  it("says what a refusal answered, its first 160 characters on one line, and nothing of a success's body", async () => {
    const lines: string[] = [];
    const dev = await startQStashDev({ timeScale: 0.001, log: (line) => lines.push(line) });
    try {
      let calls = 0;
      t.receiver.state.respond = () =>
        ++calls === 1
          ? { status: 503, body: `Your worker restarted\n mid-request. ${"x".repeat(300)}` }
          : { status: 200, body: "fine and private" };
      const res = await sdkClient(dev).publishJSON({ url: t.receiver.url("/said"), body: {}, retries: 2 });
      await dev.waitForSettled(res.messageId);
      const attempts = lines.filter((l) => l.includes(res.messageId));
      expect(attempts).toHaveLength(2);
      expect(attempts[0]).toMatch(
        new RegExp(`retried=0/2 status=503 \\d+ms answered "Your worker restarted mid-request\\. x{125}"$`),
      );
      expect(attempts[1]).toMatch(/retried=1\/2 status=200 \d+ms$/);
    } finally {
      await dev.close();
    }
  });
});

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
    // min(86400, e^(2.5·n)) seconds, n = retries so far: 1 s, then 12 s (retry docs).
    expect(settled.attempts.map((a) => a.nextRetryDelayMs)).toEqual([1000, Math.exp(2.5) * 1000, undefined]);
    // Time-scaled, but still in order and spaced at least the scaled delay apart.
    const [a, b, c] = receiver.received.map((r) => r.at);
    expect(b! - a!).toBeGreaterThanOrEqual(1);
    expect(c! - b!).toBeGreaterThanOrEqual(Math.floor(Math.exp(2.5)));
  });

  it("an Upstash-Retry-Delay expression replaces the backoff", async () => {
    const { client, dev, receiver } = t;
    receiver.state.respond = () => ({ status: 500 });
    const res = await client.publishJSON({
      url: receiver.url("/custom"),
      body: {},
      retries: 3,
      retryDelay: "max(1000, pow(2, retried) * 1500)",
    });
    const settled = await dev.waitForSettled(res.messageId);
    expect(settled.state).toBe("ERROR");
    expect(settled.attempts.map((a) => [a.nextRetryDelayMs, a.nextRetryDelaySource])).toEqual([
      [1500, "retry-delay"],
      [3000, "retry-delay"],
      [6000, "retry-delay"],
      [undefined, undefined],
    ]);
    expect(await client.messages.get(res.messageId)).toMatchObject({
      retryDelayExpression: "max(1000, pow(2, retried) * 1500)",
    });
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
  async function exhaust(path: string, label?: string | string[]) {
    t.receiver.state.respond = () => ({ status: 500, body: "down" });
    const res = await t.client.publishJSON({
      url: t.receiver.url(path),
      body: { k: path },
      retries: 1,
      ...(label === undefined ? {} : { label }),
    });
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

  it("filters by label (Upstash-Label, as the SDK sends it) and by several URLs, any value matching", async () => {
    const { client } = t;
    const ours = await exhaust("/labelled", "edge-outbox-a");
    const both = await exhaust("/two-labels", ["other", "edge-outbox-a"]);
    const theirs = await exhaust("/theirs", "edge-outbox-b");
    const none = await exhaust("/unlabelled");
    const dlqIds = async (filter: Parameters<typeof client.dlq.listMessages>[0]) =>
      (await client.dlq.listMessages(filter)).messages.map((m) => m.dlqId);

    expect(await dlqIds({ filter: { label: "edge-outbox-a" } })).toEqual([ours.dlqId, both.dlqId]);
    expect(await dlqIds({ filter: { label: ["edge-outbox-b", "other"] } })).toEqual([
      both.dlqId,
      theirs.dlqId,
    ]);
    expect(await dlqIds({ filter: { label: "nobody" } })).toEqual([]);
    expect(
      await dlqIds({ filter: { url: [t.receiver.url("/theirs"), t.receiver.url("/unlabelled")] } }),
    ).toEqual([theirs.dlqId, none.dlqId]);
    // Filters on different fields narrow each other.
    expect(await dlqIds({ filter: { label: "edge-outbox-a", url: t.receiver.url("/labelled") } })).toEqual([
      ours.dlqId,
    ]);

    const { messages } = await client.dlq.listMessages({ filter: { label: "edge-outbox-a" } });
    expect(messages[0]).toMatchObject({ label: "edge-outbox-a", labels: ["edge-outbox-a"] });
    expect(messages[1]).toMatchObject({ label: "other", labels: ["other", "edge-outbox-a"] });
    const plain = (await client.dlq.listMessages({ filter: { url: t.receiver.url("/unlabelled") } }))
      .messages[0];
    expect(plain).not.toHaveProperty("labels");
    expect(plain).not.toHaveProperty("label");
  });

  it("a DLQ retry keeps the labels; a label header naming nothing is refused", async () => {
    const { client, dev } = t;
    const failed = await exhaust("/labelled-retry", "edge-outbox-a");
    const { responses } = await client.dlq.retry([failed.dlqId]);
    const again = await dev.waitForSettled(responses[0]!.messageId);
    expect(again.state).toBe("ERROR");
    const listed = await client.dlq.listMessages({ filter: { label: "edge-outbox-a" } });
    expect(listed.messages.map((m) => m.messageId)).toEqual([responses[0]!.messageId]);

    const refused = await fetch(`${dev.url}/v2/publish/${t.receiver.url("/x")}`, {
      method: "POST",
      headers: { ...auth(), "Upstash-Label": " , " },
      body: "x",
    });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({ error: "upstash-label must name at least one label" });
  });

  it("the SDK's bulk delete forms: by ids, and all", async () => {
    const { client } = t;
    const a = await exhaust("/bulk-a");
    await exhaust("/bulk-b");
    await exhaust("/bulk-c");
    await expect(client.dlq.delete([a.dlqId])).resolves.toEqual({ deleted: 1 });
    await expect(client.dlq.delete({ all: true })).resolves.toMatchObject({ deleted: 2 });
    expect((await client.dlq.listMessages()).messages).toEqual([]);
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

  it("GET /v2/flowControl/<key> (the SDK's flowControl.get) counts the key's wait list", async () => {
    const { client, dev, receiver } = t;
    const gate: (() => void)[] = [];
    receiver.state.respond = () => new Promise((resolve) => gate.push(() => resolve({ status: 200 })));
    const key = "waitlist";
    const sent = await Promise.all(
      [1, 2, 3, 4].map((n) =>
        client.publishJSON({ url: receiver.url("/wl"), body: { n }, flowControl: { key, parallelism: 1 } }),
      ),
    );
    // Another key's messages are not this key's wait list.
    await client.publishJSON({
      url: receiver.url("/other"),
      body: {},
      flowControl: { key: "x", parallelism: 1 },
    });
    await receiver.waitForRequests(1, "/wl");
    const held = await client.flowControl.get(key);
    expect(held).toMatchObject({
      flowControlKey: key,
      waitListSize: 3,
      parallelismMax: 1,
      parallelismCount: 1,
      isPaused: false,
    });
    // The list names every key seen since the reset; a key no message had is QStash's 404.
    const listed = (await (
      await fetch(`${dev.url}/v2/flowControl`, { headers: { authorization: `Bearer ${dev.token}` } })
    ).json()) as { flowControlKey: string; waitListSize: number }[];
    expect(listed.map((c) => [c.flowControlKey, c.waitListSize]).sort()).toEqual([
      [key, 3],
      ["x", 0],
    ]);
    await expect(client.flowControl.get("never-used")).rejects.toThrow(/not found/);

    receiver.state.respond = () => ({ status: 200 });
    gate.splice(0).forEach((open) => open());
    await dev.waitFor((ms) =>
      sent.every((s) => ms.find((m) => m.messageId === s.messageId)?.state === "DELIVERED"),
    );
    expect((await client.flowControl.get(key)).waitListSize).toBe(0);
  });

  it("a key's messages go out in publish order, and a delayed one does not hold back later ones", async () => {
    const { client, dev, receiver } = t;
    dev.pauseDelivery();
    await client.publishJSON({ url: receiver.url("/order"), body: { n: 0 }, delay: 200 }); // 200 ms scaled
    for (const n of [1, 2, 3, 4]) {
      await client.publishJSON({
        url: receiver.url("/order"),
        body: { n },
        flowControl: { key: "ord", parallelism: 1 },
      });
    }
    dev.resumeDelivery();
    const got = await receiver.waitForRequests(5, "/order");
    expect(got.map((r) => (JSON.parse(r.body) as { n: number }).n)).toEqual([1, 2, 3, 4, 0]);
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

  it("keepSettled: forgets the oldest settled messages beyond it, never a waiting one", async () => {
    // A server left running kept every message it had delivered, and grew with them.
    const dev = await startQStashDev({ timeScale: 0.001, keepSettled: 2 });
    const receiver = await startReceiver();
    try {
      const client = sdkClient(dev);
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const { messageId } = await client.publishJSON({ url: receiver.url(`/m${i}`), body: {} });
        await dev.waitForSettled(messageId);
        ids.push(messageId);
      }
      expect(receiver.received).toHaveLength(5);
      expect(dev.messages().map((m) => m.messageId)).toEqual(ids.slice(3));
      dev.pauseDelivery();
      const waiting = await client.publishJSON({ url: receiver.url("/later"), body: {} });
      expect(dev.messages().map((m) => m.messageId)).toEqual([...ids.slice(3), waiting.messageId]);
      dev.resumeDelivery();
      await dev.waitForSettled(waiting.messageId);
      expect(dev.messages().map((m) => m.messageId)).toEqual([ids[4], waiting.messageId]);
      await expect(client.messages.get(ids[0]!)).rejects.toThrow();
    } finally {
      await dev.close();
      await receiver.close();
    }
  });

  it("quiesce() starts no attempt and waits for those under way to be answered", async () => {
    // What npm run dev does before it stops the Worker: an attempt the stopping Worker
    // refused or cut counted as a failure and cost its job a retry.
    const dev = await startQStashDev({ timeScale: 0.001 });
    const slow = await startReceiver();
    let release!: () => void;
    const answered = new Promise<void>((resolve) => (release = resolve));
    slow.state.respond = (r) =>
      r.path === "/slow" ? answered.then(() => ({ status: 200 })) : { status: 200 };
    try {
      const client = sdkClient(dev);
      const inFlight = await client.publishJSON({ url: slow.url("/slow"), body: {} });
      await slow.waitForRequests(1);
      const quiet = dev.quiesce(10_000);
      const later = await client.publishJSON({ url: slow.url("/later"), body: {} });
      setTimeout(release, 200);
      expect(await quiet).toBe(0);
      expect(dev.message(inFlight.messageId)?.state).toBe("DELIVERED");
      expect(dev.message(later.messageId)?.state).toBe("CREATED");
      expect(slow.received.map((r) => r.path)).toEqual(["/slow"]);
      // With attempts that outlast the wait (the one held back, and a new one), it
      // says how many were left.
      slow.state.respond = () => new Promise(() => {});
      dev.resumeDelivery();
      const stuck = await client.publishJSON({ url: slow.url("/stuck"), body: {} });
      await dev.waitFor(
        (ms) =>
          ms.filter((m) => [later.messageId, stuck.messageId].includes(m.messageId) && m.state === "ACTIVE")
            .length === 2,
      );
      expect(await dev.quiesce(100)).toBe(2);
    } finally {
      await dev.close();
      await slow.close();
    }
  });

  it("close() cancels in-flight deliveries and resolves promptly", async () => {
    const dev = await startQStashDev({ timeScale: 0.001 });
    const hanging = await startReceiver();
    hanging.state.respond = () => new Promise(() => {}); // never answers
    try {
      const client = sdkClient(dev);
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

describe("documented extras", () => {
  it("Upstash-Callback reports failed attempts too, each with its retried count (callbacks docs)", async () => {
    const { client, dev, receiver } = t;
    let calls = 0;
    receiver.state.respond = (r) =>
      r.path === "/cb-each"
        ? { status: 200 }
        : ++calls === 1
          ? { status: 502, body: "bad gw" }
          : { status: 200 };
    const res = await client.publishJSON({
      url: receiver.url("/work2"),
      body: {},
      callback: receiver.url("/cb-each"),
    });
    const callbacks = await receiver.waitForRequests(2, "/cb-each");
    const bodies = callbacks.map((c) => JSON.parse(c.body) as { status: number; retried: number });
    expect(bodies.map((b) => [b.status, b.retried]).sort()).toEqual([
      [200, 1],
      [502, 0],
    ]);
    expect(dev.message(res.messageId)!.state).toBe("DELIVERED");
  });

  it("Upstash-Failure-Callback-* headers configure the failure callback message", async () => {
    const { dev, receiver } = t;
    receiver.state.respond = (r) => (r.path === "/fcb" ? { status: 500 } : { status: 500 });
    const res = await fetch(`${dev.url}/v2/publish/${receiver.url("/down")}`, {
      method: "POST",
      headers: {
        ...auth(),
        "Upstash-Retries": "0",
        "Upstash-Failure-Callback": receiver.url("/fcb"),
        "Upstash-Failure-Callback-Retries": "1",
        "Upstash-Failure-Callback-Method": "PUT",
        "Upstash-Failure-Callback-Forward-X-Alert": "pager",
      },
      body: "payload",
    });
    const { messageId } = (await res.json()) as { messageId: string };
    const callback = await dev.waitFor((ms) =>
      ms.find((m) => m.kind === "failure-callback" && m.sourceMessageId === messageId && m.state === "ERROR"),
    );
    expect(callback).toMatchObject({ method: "PUT", maxRetries: 1 });
    const calls = await receiver.waitForRequests(2, "/fcb");
    expect(calls.map((c) => [c.method, c.headers["x-alert"], c.headers["upstash-retried"]])).toEqual([
      ["PUT", "pager", "0"],
      ["PUT", "pager", "1"],
    ]);
    // A failed failure callback lands in the DLQ itself, without spawning further callbacks.
    expect(dev.messages().filter((m) => m.kind === "failure-callback")).toHaveLength(1);
  });

  it("callbacks inherit the original message's retries unless Upstash-Callback-Retries is set", async () => {
    const { client, dev, receiver } = t;
    receiver.state.respond = (r) => (r.path === "/cb-down" ? { status: 500 } : { status: 200 });
    const res = await client.publishJSON({
      url: receiver.url("/ok"),
      body: {},
      retries: 1,
      callback: receiver.url("/cb-down"),
    });
    const callback = await dev.waitFor((ms) =>
      ms.find((m) => m.kind === "callback" && m.sourceMessageId === res.messageId && m.state === "ERROR"),
    );
    expect(callback.maxRetries).toBe(1);
    expect(callback.attempts).toHaveLength(2);
  });

  it("client.messages.cancel cancels a pending message", async () => {
    const { client, dev, receiver } = t;
    dev.pauseDelivery();
    const res = await client.publishJSON({ url: receiver.url("/cancel"), body: {} });
    await expect(client.messages.cancel(res.messageId)).resolves.toEqual({ cancelled: 1 });
    dev.resumeDelivery();
    const delivered = await client.publishJSON({ url: receiver.url("/after-cancel"), body: {} });
    await dev.waitForSettled(delivered.messageId);
    expect(dev.message(res.messageId)!.state).toBe("CANCELLED");
    expect(receiver.received.map((r) => r.path)).toEqual(["/after-cancel"]);
  });

  it("flow-control rate limits starts per period", async () => {
    const { client, dev, receiver } = t;
    const sent = await Promise.all(
      [1, 2, 3].map(() =>
        client.publishJSON({
          url: receiver.url("/rate-limited"),
          body: {},
          flowControl: { key: "r1", rate: 2, period: "300ms" as never },
        }),
      ),
    );
    await dev.waitFor((ms) =>
      sent.every((s) => ms.find((m) => m.messageId === s.messageId)?.state === "DELIVERED"),
    );
    // Start times as the scheduler saw them; arrival times would add connection jitter.
    const starts = dev
      .messages()
      .map((m) => m.attempts[0]!.startedAt)
      .sort((a, b) => a - b);
    expect(starts[1]! - starts[0]!).toBeLessThan(300);
    expect(starts[2]! - starts[0]!).toBeGreaterThanOrEqual(300);
    expect(receiver.received).toHaveLength(3);
  });
});
