import { beforeAll, describe, expect, it } from "vitest";
import { MAX_DISCARD_BYTES } from "../../src/worker/body-limit.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { appOverTestDatabase, bindings, executionContext } from "../support/worker.ts";

const t = useTestDatabase();
const app = appOverTestDatabase(t);
const MB = 1024 * 1024;
let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});

/**
 * A body produced on demand in 64 KiB chunks of a JSON note (endless when
 * `totalBytes` is Infinity), counting what the app actually pulled (and whether
 * all of it): a refusal "without reading" pulls (next to) nothing.
 */
function lazyNote(totalBytes: number) {
  const pulled = { bytes: 0, toTheEnd: false };
  const head = new TextEncoder().encode('{"title":"big","body":"');
  const chunk = new Uint8Array(64 * 1024).fill(0x78);
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const piece =
        sent === 0 ? head : sent + chunk.length >= totalBytes ? new TextEncoder().encode('"}') : chunk;
      sent += piece.length;
      pulled.bytes += piece.length;
      controller.enqueue(piece);
      if (piece.length === 2) {
        pulled.toTheEnd = true;
        controller.close();
      }
    },
  });
  return { stream, pulled };
}

async function send(path: string, body: ReadableStream, headers: Record<string, string>, env: Bindings) {
  const { ctx, settled } = executionContext();
  const res = await app.request(
    `http://worker.test${path}`,
    withKey(key, { method: "POST", headers, body, duplex: "half" } as RequestInit),
    env,
    ctx,
  );
  const json = await res.json();
  await settled();
  return { status: res.status, body: json as { error: { code: string; message: string } } };
}

describe("request bodies are capped before they are read", () => {
  const env = bindings({ DATABASE_URL: "" });

  it("a 5 MB note with its Content-Length declared is a 413 without reading the body", async () => {
    const { stream, pulled } = lazyNote(5 * MB);
    const res = await send(
      "/notes",
      stream,
      { "content-type": "application/json", "content-length": String(5 * MB) },
      { ...env, DATABASE_URL: t.url },
    );
    expect(res.status).toBe(413);
    expect(res.body.error).toMatchObject({
      code: "PAYLOAD_TOO_LARGE",
      message: expect.stringContaining(`${MB} bytes`),
    });
    expect(pulled.bytes).toBeLessThan(128 * 1024);
  });

  it("a 5 MB chunked note (no Content-Length) is a 413 once the cap is passed, the rest read and dropped", async () => {
    // Read to its end: workerd breaks the connection of a body answered while still
    // arriving, and the next request fails (workerd-body-limit.test.ts shows it).
    const { stream, pulled } = lazyNote(5 * MB);
    const res = await send(
      "/notes",
      stream,
      { "content-type": "application/json" },
      { ...env, DATABASE_URL: t.url },
    );
    expect(res.status).toBe(413);
    expect(res.body.error).toMatchObject({
      code: "PAYLOAD_TOO_LARGE",
      message: `the request body may be at most ${MB} bytes`,
    });
    expect(pulled.toTheEnd).toBe(true);
  });

  it("an endless chunked body is a 413, read no further than MAX_DISCARD_BYTES past the cap", async () => {
    const { stream, pulled } = lazyNote(Infinity);
    const res = await send(
      "/notes",
      stream,
      { "content-type": "application/json" },
      { ...env, DATABASE_URL: t.url },
    );
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe("PAYLOAD_TOO_LARGE");
    expect(pulled.bytes).toBeGreaterThan(MB + MAX_DISCARD_BYTES);
    expect(pulled.bytes).toBeLessThan(MB + MAX_DISCARD_BYTES + 256 * 1024);
  });

  it("the cap is the MAX_BODY_BYTES binding", async () => {
    const small = { ...env, DATABASE_URL: t.url, MAX_BODY_BYTES: "2048" };
    const body = new Blob([JSON.stringify({ name: "x".repeat(4096) })]).stream();
    const res = await send("/suppliers", body, { "content-type": "application/json" }, small);
    expect(res.status).toBe(413);
    expect(res.body.error.message).toContain("2048 bytes");
  });

  it("a job route refuses an unsigned request before reading its body, however large", async () => {
    for (const path of ["/jobs/notify.mail", "/jobs/_failed"]) {
      const { stream, pulled } = lazyNote(5 * MB);
      const res = await send(
        path,
        stream,
        { "content-type": "application/json" },
        { ...env, DATABASE_URL: t.url },
      );
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("UNAUTHORIZED");
      expect(pulled.bytes).toBeLessThan(128 * 1024);
    }
  });

  it("a signed-looking job body over the cap is a 413 before its signature is checked", async () => {
    const { stream, pulled } = lazyNote(Infinity);
    const res = await send(
      "/jobs/notify.mail",
      stream,
      { "upstash-signature": "x.y.z" },
      { ...env, DATABASE_URL: t.url },
    );
    expect(res.status).toBe(413);
    expect(pulled.bytes).toBeLessThan(MB + MAX_DISCARD_BYTES + 256 * 1024);
  });

  it("a job route answers 401 to an unsigned caller before looking at a malformed Prefer", async () => {
    const { ctx, settled } = executionContext();
    const res = await app.request(
      "http://worker.test/jobs/notify.mail",
      { method: "POST", headers: { prefer: "wait=soon", "content-type": "application/json" }, body: "{}" },
      { ...env, DATABASE_URL: t.url },
      ctx,
    );
    await settled();
    expect(res.status).toBe(401);
  });
});
