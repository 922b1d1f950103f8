import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";
import { bindings, executionContext } from "../support/worker.ts";

// The operator page, through the app as the Worker runs it (Neon driver via the proxy).
const t = useTestDatabase();
let proxy: WsProxy;
let env: Bindings;
const app = createApp();
const ORIGIN = "http://worker.test";

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  env = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address });
});
afterAll(() => proxy?.close());
beforeEach(async () => {
  await resetOutbox(t.pool);
  await t.pool.query("TRUNCATE job_failures");
});

const basic = (password = env.ADMIN_TOKEN) => `Basic ${btoa(`admin:${password}`)}`;

async function get(path: string, headers: Record<string, string> = { Authorization: basic() }) {
  const { ctx, settled } = executionContext();
  const res = await app.request(`${ORIGIN}${path}`, { headers }, env, ctx);
  // Layout whitespace between tags is not content.
  const text = (await res.text()).replace(/>\s+</g, "><");
  await settled();
  return { status: res.status, headers: res.headers, text };
}

async function postForm(path: string, form: Record<string, string>, origin: string) {
  const { ctx, settled } = executionContext();
  const res = await app.request(
    `${ORIGIN}${path}`,
    {
      method: "POST",
      headers: {
        Authorization: basic(),
        Origin: origin,
        "content-type": "application/x-www-form-urlencoded",
      },
      body: new URLSearchParams(form).toString(),
      redirect: "manual",
    },
    env,
    ctx,
  );
  const text = await res.text();
  await settled();
  return { status: res.status, headers: res.headers, text };
}

async function poison(error: string): Promise<string> {
  const [id] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
  await t.pool.query(`UPDATE events SET poisoned_at = now(), attempts = 5, last_error = $2 WHERE id = $1`, [
    id,
    error,
  ]);
  return id!;
}

describe("operator dashboard", () => {
  it("asks a browser for operator credentials", async () => {
    const anonymous = await get("/dashboard", {});
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("WWW-Authenticate")).toMatch(/^Basic realm="edge-outbox operators"/);
    expect(JSON.parse(anonymous.text).error.message).toMatch(/user admin, password ADMIN_TOKEN/);
    expect((await get("/dashboard", { Authorization: basic("wrong") })).status).toBe(401);
    expect((await get("/dashboard/events/00000000-0000-4000-8000-000000000000", {})).status).toBe(401);
  });

  it("shows the backlog, poisoned events with their errors (escaped), and failed jobs", async () => {
    await seedEvents(t.pool, 3);
    const id = await poison("QStash 400: <script>alert(1)</script>");
    await t.pool.query(
      `INSERT INTO job_failures (message_id, subscription, event_id, status, body) VALUES ('msg_dead', 'notify.mail', $1, 500, '{}')`,
      [id],
    );
    const page = await get("/dashboard");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    expect(page.text).toMatch(/<th>backlog<\/th><td>3 \(3 due now\)<\/td>/);
    expect(page.text).toContain(`href="/dashboard/events/${id}"`);
    expect(page.text).toContain("QStash 400: &lt;script&gt;alert(1)&lt;/script&gt;");
    expect(page.text).not.toContain("<script>alert(1)");
    expect(page.text).toContain("msg_dead");
  });

  it("shows an event's fan-out", async () => {
    const [id] = await seedEvents(t.pool, 1);
    await t.pool.query(`UPDATE events SET fanned_out_at = now(), fanout = $2 WHERE id = $1`, [
      id,
      JSON.stringify({ "notify.mail": { messageId: "msg_abc" }, "corpus.index": { coalescedInto: id } }),
    ]);
    const page = await get(`/dashboard/events/${id}`);
    expect(page.status).toBe(200);
    expect(page.text).toMatch(/<td>notify\.mail<\/td><td>\s*msg_abc\s*<\/td>/);
    expect(page.text).toMatch(new RegExp(`coalesced into\\s+<a href="/dashboard/events/${id}">`));
    expect((await get("/dashboard/events/00000000-0000-4000-8000-000000000000")).status).toBe(404);
  });

  it("requeues a poisoned event from a same-site form, and refuses a cross-site post", async () => {
    const id = await poison("boom");
    const forged = await postForm("/dashboard/requeue", { id }, "https://evil.example");
    expect(forged.status).toBe(403);
    expect(JSON.parse(forged.text).error).toMatchObject({
      code: "FORBIDDEN",
      message: expect.stringContaining("cross-site request refused"),
    });
    expect(
      (await t.pool.query(`SELECT poisoned_at FROM events WHERE id = $1`, [id])).rows[0].poisoned_at,
    ).not.toBeNull();

    const done = await postForm("/dashboard/requeue", { id }, ORIGIN);
    expect(done.status).toBe(303);
    expect(done.headers.get("Location")).toBe(`/dashboard?requeued=${id}`);
    expect(
      (await t.pool.query(`SELECT poisoned_at FROM events WHERE id = $1`, [id])).rows[0].poisoned_at,
    ).toBeNull();

    const bad = await postForm("/dashboard/requeue", { id: "not-an-id" }, ORIGIN);
    expect(bad.status).toBe(400);

    // Requeued again, it is no longer poisoned: the notice says nothing happened.
    const again = await postForm("/dashboard/requeue", { id }, ORIGIN);
    expect(again.headers.get("Location")).toBe(`/dashboard?unchanged=${id}`);
    expect((await get(`/dashboard?unchanged=${id}`)).text).toContain(`nothing: ${id} is not poisoned`);
  });

  it("the requeued notice shows only an event id, never text a link brought", async () => {
    const shown = await get(`/dashboard?requeued=${encodeURIComponent("all events. Call +1 555 0100 now")}`);
    expect(shown.status).toBe(200);
    expect(shown.text).not.toContain("555 0100");
    expect(shown.text).not.toContain("Requeued");
    const id = "00000000-0000-4000-8000-000000000001";
    expect((await get(`/dashboard?requeued=${id}`)).text).toContain(`Requeued ${id}.`);
  });
});
