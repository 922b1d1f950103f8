import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { unstable_startWorker } from "wrangler";
import { fileURLToPath } from "node:url";
import { startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";
import { bindings } from "../support/worker.ts";

// The same app, bundled by wrangler and run by workerd: proves the Worker code
// is edge-safe and that the Neon driver reaches Postgres from the real runtime
// (global WebSocket, no Node built-ins), not only from Node.
const t = useTestDatabase();
let proxy: WsProxy;
let worker: Awaited<ReturnType<typeof unstable_startWorker>>;

beforeAll(async () => {
  proxy = await startWsProxy();
  const vars = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address });
  worker = await unstable_startWorker({
    // The deployable configuration (entry, compatibility date and flags), with test bindings.
    config: fileURLToPath(new URL("../../wrangler.toml", import.meta.url)),
    sendMetrics: false,
    bindings: Object.fromEntries(
      Object.entries(vars).map(([name, value]) => [name, { type: "plain_text" as const, value: value! }]),
    ),
    dev: {
      server: { hostname: "127.0.0.1", port: 0 },
      inspector: false,
      watch: false,
      persist: false,
      logLevel: "warn",
    },
  });
  await worker.ready;
});

afterAll(async () => {
  await worker?.dispose();
  await proxy?.close();
});

async function call(method: string, path: string, body?: unknown) {
  const res = await worker.fetch(`http://worker.test${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, body: (await res.json()) as any };
}

describe("the Worker in workerd", () => {
  it("answers /healthz from the database", async () => {
    const res = await call("GET", "/healthz");
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("ok");
  });

  it("commits a note with its event and answers with the event id", async () => {
    const res = await call("POST", "/notes", { title: "From workerd" });
    expect(res.status).toBe(201);
    const recorded = await eventsAbout(t.pool, res.body.note.id);
    expect(res.body.events).toEqual(recorded.map((e) => ({ id: e.id })));
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created"]);
  });

  it("keeps the envelope for domain errors and unknown routes", async () => {
    const supplier = await call("POST", "/suppliers", { name: "Edge" });
    const early = await call("POST", `/suppliers/${supplier.body.supplier.id}/activate`);
    expect(early.status).toBe(409);
    expect(early.body.error.code).toBe("CONFLICT");
    const unknown = await call("GET", "/nowhere");
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({ code: "NOT_FOUND", requestId: expect.any(String) });
  });
});
