import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startMailSink, type MailSink } from "../../infra/mail-sink.ts";

let sink: MailSink;
const lines: string[] = [];

beforeAll(async () => {
  sink = await startMailSink({ log: (line) => lines.push(line) });
});
afterAll(() => sink?.close());

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${sink.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

describe("mail sink", () => {
  it("accepts a mail, answers with a message id, logs one line and shows it in /__received", async () => {
    const res = await post("/mail", { to: "ops@example.test", subject: "Hi", text: "hello" });
    expect(res.status).toBe(200);
    const { id } = (await res.json()) as { id: string };
    expect(id).toMatch(/^sink-\d+$/);

    const [entry] = sink.received({ path: "/mail" });
    expect(entry).toMatchObject({
      method: "POST",
      status: 200,
      json: { to: "ops@example.test", subject: "Hi" },
    });
    expect(entry!.headers["content-type"]).toBe("application/json");
    expect(lines.filter((l) => l.includes("/mail"))).toEqual([
      expect.stringMatching(/^sink POST \/mail 200 \d+B mail to ops@example.test: Hi$/),
    ]);

    const listed = (await (await fetch(`${sink.url}/__received`)).json()) as unknown[];
    expect(listed).toContainEqual(expect.objectContaining({ path: "/mail", json: entry!.json }));
  });

  it("waitFor resolves when a matching request arrives, not before", async () => {
    const waiting = sink.waitFor((r) => r.path === "/hooks/a");
    let resolved = false;
    void waiting.then(() => (resolved = true));
    await post("/hooks/b", { other: true });
    expect(resolved).toBe(false);
    await post("/hooks/a", { type: "supplier.connected" }, { "webhook-id": "msg_1" });
    await expect(waiting).resolves.toMatchObject({ path: "/hooks/a", headers: { "webhook-id": "msg_1" } });
    await expect(sink.waitFor((r) => r.path === "/never", 50)).rejects.toThrow(/no matching request/);
  });

  it("logs a webhook with its webhook-* headers and lists it, headers included, under ?path=", async () => {
    const headers = {
      "webhook-id": "0193a6f0-7d2e-7c1a-9b1e-2f1f6a3c9d10",
      "webhook-timestamp": "1764748800",
      "webhook-signature":
        "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,BdWw8bD0aPbDdLz3hAYy0sAY5tW7pwSeHV7lgHJeP9o=",
    };
    await post(
      "/webhooks",
      { type: "supplier.created", timestamp: "2026-12-03T08:00:00Z", data: {} },
      headers,
    );
    expect(lines.filter((l) => l.includes("/webhooks"))).toEqual([
      "sink POST /webhooks 200 " +
        `${JSON.stringify({ type: "supplier.created", timestamp: "2026-12-03T08:00:00Z", data: {} }).length}B ` +
        "webhook supplier.created webhook-id=0193a6f0-7d2e-7c1a-9b1e-2f1f6a3c9d10 webhook-timestamp=1764748800 " +
        "webhook-signature=v1,K5oZfzN95… v1,BdWw8bD0a…",
    ]);
    const listed = (await (await fetch(`${sink.url}/__received?path=/webhooks`)).json()) as {
      path: string;
      headers: Record<string, string>;
    }[];
    expect(listed.map((r) => r.path)).toEqual(["/webhooks"]);
    expect(listed[0]!.headers).toMatchObject(headers);
  });

  it("answers what a test tells it to, and records those requests too", async () => {
    sink.respondWith({ status: 503, body: { error: "down" } });
    expect((await post("/hooks/flaky", { attempt: 1 })).status).toBe(503);
    sink.respondWith(null);
    expect((await post("/hooks/flaky", { attempt: 2 })).status).toBe(200);
    expect(sink.received({ path: "/hooks/flaky" }).map((r) => r.status)).toEqual([503, 200]);
  });

  it("PUT /__respond makes it fail from outside the process, for one path or all, until DELETE", async () => {
    const respond = (method: string, body?: unknown) =>
      fetch(`${sink.url}/__respond`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    expect((await respond("PUT", { status: 503, path: "/hooks/down", body: { error: "down" } })).status).toBe(
      200,
    );
    const down = await post("/hooks/down", { attempt: 1 });
    expect(down.status).toBe(503);
    expect(await down.json()).toEqual({ error: "down" });
    expect((await post("/mail", { to: "a@b.example" })).status).toBe(200);
    expect((await respond("PUT", { status: 500 })).status).toBe(200);
    expect((await post("/mail", { to: "a@b.example" })).status).toBe(500);
    expect((await respond("DELETE")).status).toBe(204);
    expect((await post("/hooks/down", { attempt: 2 })).status).toBe(200);
    for (const bad of [{}, { status: 99 }, { status: "503" }, { status: 503, path: "hooks" }]) {
      expect((await respond("PUT", bad)).status, JSON.stringify(bad)).toBe(400);
    }
    expect(
      lines.some((l) => l.includes("sink answers 503 to POSTs to /hooks/down until DELETE /__respond")),
    ).toBe(true);
  });

  it("keeps one answer per path: a second PUT adds to the first, a DELETE with a path removes only it", async () => {
    const respond = (method: string, query = "", body?: unknown) =>
      fetch(`${sink.url}/__respond${query}`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    await respond("PUT", "", { status: 503, path: "/mail" });
    const second = await respond("PUT", "", { status: 500, path: "/webhooks" });
    expect(await second.json()).toEqual({
      status: 500,
      path: "/webhooks",
      rules: [
        { path: "/mail", status: 503 },
        { path: "/webhooks", status: 500 },
      ],
    });
    await respond("PUT", "", { status: 502 });
    expect((await post("/mail", {})).status).toBe(503);
    expect((await post("/webhooks", {})).status).toBe(500);
    expect((await post("/other", {})).status).toBe(502);

    expect((await respond("DELETE", "?path=/mail")).status).toBe(204);
    expect((await post("/mail", {})).status).toBe(502);
    expect((await post("/webhooks", {})).status).toBe(500);
    expect(
      lines.some((l) => l.includes("sink answers normally again to POSTs to /mail; still answering")),
    ).toBe(true);
    await respond("DELETE");
    for (const path of ["/mail", "/webhooks", "/other"]) expect((await post(path, {})).status).toBe(200);
  });

  it("PUT /__respond with delayMs holds the answer, and says when the sender gave up first", async () => {
    const respond = (method: string, query = "", body?: unknown) =>
      fetch(`${sink.url}/__respond${query}`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    try {
      // A delay alone: a slow receiver that still says yes.
      const slow = await respond("PUT", "", { delayMs: 300, path: "/slow" });
      expect(await slow.json()).toEqual({
        status: 200,
        delayMs: 300,
        path: "/slow",
        rules: [{ path: "/slow", status: 200, delayMs: 300 }],
      });
      const started = Date.now();
      const answered = await post("/slow", { attempt: 1 });
      expect(answered.status).toBe(200);
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      expect(sink.received({ path: "/slow" })).toEqual([
        expect.objectContaining({ status: 200, delayMs: 300 }),
      ]);
      expect(sink.received({ path: "/slow" })[0]).not.toHaveProperty("abandonedAfterMs");

      // A sender whose timeout is shorter than the delay: the sink records that it gave up.
      await respond("PUT", "", { status: 503, delayMs: 5_000, path: "/timeout" });
      const aborted = await fetch(`${sink.url}/timeout`, {
        method: "POST",
        body: "{}",
        signal: AbortSignal.timeout(200),
      }).catch((error: Error) => error.name);
      expect(aborted).toBe("TimeoutError");
      await expect
        .poll(() => sink.received({ path: "/timeout" }).map((r) => r.abandonedAfterMs !== undefined))
        .toEqual([true]);
      const [last] = sink.received({ path: "/timeout" });
      expect(last!.abandonedAfterMs).toBeGreaterThanOrEqual(150);
      expect(last!.abandonedAfterMs).toBeLessThan(5_000);
      expect(lines).toContainEqual(
        expect.stringMatching(
          new RegExp(
            `^sink POST /timeout #${last!.n}: the sender gave up after \\d+ ms, before the 5000 ms answer$`,
          ),
        ),
      );
      expect(lines).toContainEqual(
        "sink answers 503 after 5000 ms to POSTs to /timeout until DELETE /__respond",
      );

      for (const bad of [{ delayMs: -1 }, { delayMs: 1.5 }, { delayMs: "100" }, { delayMs: 120_001 }]) {
        expect((await respond("PUT", "", bad)).status, JSON.stringify(bad)).toBe(400);
      }
    } finally {
      await respond("DELETE");
    }
  });

  it("refuses other methods", async () => {
    expect((await fetch(`${sink.url}/mail`, { method: "PUT", body: "x" })).status).toBe(405);
  });
});

describe("a sink left running", () => {
  it("keeps only the newest keepReceived requests", async () => {
    const small = await startMailSink({ log: () => undefined, keepReceived: 3 });
    try {
      for (let i = 1; i <= 5; i++) {
        await fetch(`${small.url}/mail`, { method: "POST", body: JSON.stringify({ i }) });
      }
      expect(small.received().map((r) => r.json)).toEqual([{ i: 3 }, { i: 4 }, { i: 5 }]);
      const listed = (await (await fetch(`${small.url}/__received`)).json()) as { n: number }[];
      expect(listed.map((r) => r.n)).toEqual([3, 4, 5]);
    } finally {
      await small.close();
    }
  });
});
