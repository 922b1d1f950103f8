import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import type { Db } from "../../src/domain/db.ts";
import { deliverWebhook } from "../../src/domain/webhooks/deliver.ts";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { startReceiver } from "../qstash-dev/receiver.ts";
import { dashboardClient } from "../support/dashboard.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { insertEndpoint, useSecretsKey, verifyWebhook } from "../support/webhooks.ts";
import { evaluateEndpointLag } from "../../src/domain/webhooks/lag.ts";
import { bindings, call, executionContext } from "../support/worker.ts";

// The webhook endpoint page's delivery actions (send test, redeliver, recover)
// and its deliveries list, through the app as the Worker runs it. Jobs go to the
// QStash dev server, paused: each is published, never delivered by QStash; a
// test that needs the attempt runs the delivery use case itself.
const t = useTestDatabase();
const secrets = useSecretsKey();
let proxy: WsProxy;
let qstash: QStashDev;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let env: Bindings;
let browser: ReturnType<typeof dashboardClient>;
const EVIL = { Origin: "https://evil.example" };

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  qstash = await startQStashDev({ log: () => undefined });
  qstash.pauseDelivery();
  receiver = await startReceiver();
  env = bindings({
    DATABASE_URL: t.url,
    NEON_WS_PROXY: proxy.address,
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
    WEBHOOK_SECRETS_KEY: secrets.base64,
  });
  browser = dashboardClient(() => env);
  expect((await browser.login()).status).toBe(303);
});
afterAll(async () => {
  await Promise.all([proxy?.close(), qstash?.close(), receiver?.close()]);
});
beforeEach(async () => {
  await t.pool.query("TRUNCATE webhook_endpoints CASCADE");
  receiver.reset();
  qstash.reset();
  qstash.pauseDelivery();
});

const endpoint = (path: string, scope: string | null = null, enabled = true) =>
  insertEndpoint(t.pool, secrets.key, { url: receiver.url(path), scope, enabled });

/** A delivery row as fan-out leaves it, then settled as `status` says. */
async function delivery(
  endpointId: string,
  status: "pending" | "delivered" | "failed",
  scope?: string | null,
) {
  const [eventId] = await seedEvents(t.pool, 1, { fanned: true });
  const { rows } = await t.pool.query(
    `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body, status, attempts,
                                     failed_at, delivered_at, last_error)
     SELECT $1, $2, 'supplier.connected', COALESCE($4, e.scope), '{"type":"supplier.connected"}', $3,
            CASE WHEN $3 = 'pending' THEN 0 ELSE 1 END,
            CASE WHEN $3 = 'failed' THEN now() END, CASE WHEN $3 = 'delivered' THEN now() END,
            CASE WHEN $3 = 'failed' THEN 'endpoint answered 500' END
       FROM webhook_endpoints e WHERE e.id = $1
     RETURNING id`,
    [endpointId, eventId, status, scope ?? null],
  );
  return rows[0].id as string;
}

async function rows(endpointId: string) {
  const { rows } = await t.pool.query(
    `SELECT id, event_type, status, message_id, scope FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at, id`,
    [endpointId],
  );
  return rows as {
    id: string;
    event_type: string;
    status: string;
    message_id: string | null;
    scope: string | null;
  }[];
}

const publishedFor = (deliveryId: string) =>
  qstash.messages().filter((m) => m.kind !== "failure-callback" && m.body.includes(deliveryId));

const deliver = async (deliveryId: string) =>
  deliverWebhook(
    {
      db: t.db as unknown as Db,
      secretsKey: await secrets.key,
      schedule: [5],
      urlPolicy: { allowPrivate: true },
    },
    deliveryId,
    0,
  );

describe("send test event", () => {
  it("is refused for a post of any type but its form's, with the session and no Origin, and sends nothing", async () => {
    // Hono's origin check looks only at the types a cross-site form can send: a JSON
    // post with the session cookie and no Origin went through, and the test was sent.
    const target = await endpoint("/target");
    const app = createApp();
    for (const type of ["application/json", "text/plainx", undefined]) {
      const headers = new Headers({ cookie: browser.cookie! });
      if (type) headers.set("content-type", type);
      const { ctx, settled } = executionContext();
      const res = await app.request(
        `http://127.0.0.1:8787/dashboard/webhooks/${target.id}/test`,
        { method: "POST", headers, body: "{}" },
        env,
        ctx,
      );
      await settled();
      expect(res.status, String(type)).toBe(415);
    }
    expect(await rows(target.id)).toEqual([]);
    expect((await browser.post(`/dashboard/webhooks/${target.id}/test`, {})).status).toBe(303);
    expect(await rows(target.id)).toHaveLength(1);
  });

  it("sends to that endpoint only, answers with the delivery's page, which then shows the delivered attempt", async () => {
    const scope = "acme";
    const target = await endpoint("/target", scope);
    const sibling = await endpoint("/sibling", scope);
    const other = await endpoint("/other", "globex");
    const page = await browser.get(`/dashboard/webhooks/${target.id}`);
    expect(page.text).toContain(
      `<form class="inline" method="post" action="/dashboard/webhooks/${target.id}/test">`,
    );

    const sent = await browser.post(`/dashboard/webhooks/${target.id}/test`, {});
    expect(sent.status).toBe(303);
    const location = sent.headers.get("location")!;
    const [, deliveryId] = /^\/dashboard\/webhooks\/deliveries\/([0-9a-f-]{36})\?tested=1$/.exec(location)!;
    expect(await rows(target.id)).toEqual([
      expect.objectContaining({ id: deliveryId, event_type: "webhook.test", status: "pending", scope }),
    ]);
    expect(await rows(sibling.id)).toEqual([]);
    expect(await rows(other.id)).toEqual([]);
    expect(publishedFor(deliveryId!)).toHaveLength(1);

    const pending = await browser.get(location);
    expect(pending.status).toBe(200);
    expect(pending.text).toContain(
      "Test event sent. This page shows the result when it is delivered or gives up.",
    );
    expect(pending.text).toMatch(/<h1>webhook\.test <span class="state state-pending">pending<\/span><\/h1>/);
    // Reloaded only by a browser without script: with it, the page is watched in
    // place (the browser test follows that), since a reload moves focus to the top.
    expect(pending.text).toMatch(
      /<noscript><meta http-equiv="refresh" content="2; url=[^"]*reloaded=1"\/><\/noscript>/,
    );
    // Said first, with a way to stop it, and marked for the script to watch.
    expect(pending.text).toMatch(
      new RegExp(
        `<p class="live" data-watch="[^"]*reloaded=1" data-every="2"><span>This page reloads every 2 s. </span>` +
          `<a href="/dashboard/webhooks/deliveries/${deliveryId}">Stop reloading</a></p>`,
      ),
    );
    expect((await browser.get(`/dashboard/webhooks/deliveries/${deliveryId}`)).text).not.toMatch(
      /http-equiv="refresh"/,
    );
    // A test event is no row in `events`: nothing links to an event page that would 404.
    expect(pending.text).not.toContain('href="/dashboard/events/');
    expect(pending.text).toContain("No attempt yet.");
    // Its own reload does not pull focus back to the notice.
    const reload = /content="2; url=([^"]+)"/.exec(pending.text)![1]!.replace(/&amp;/g, "&");
    const reloaded = await browser.get(reload);
    expect(reloaded.text).toContain(
      '<p class="notice" role="status" id="notice" tabindex="-1">Test event sent.',
    );
    // With its next attempt an hour away (a failed first one), it stops reloading and says when.
    await t.pool.query(
      "UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour' WHERE id = $1",
      [deliveryId],
    );
    const later = await browser.get(location);
    expect(later.text).not.toMatch(/http-equiv="refresh"/);
    expect(later.text).toMatch(/Test event sent\. Its next attempt is at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\./);
    // An attempt that failed says so, not "sent" and a time alone.
    await t.pool.query("UPDATE webhook_deliveries SET last_error = 'endpoint answered 503' WHERE id = $1", [
      deliveryId,
    ]);
    expect((await browser.get(location)).text).toMatch(
      /Test event sent\. Its attempt failed \(endpoint answered 503\); the next is at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\./,
    );
    await t.pool.query("UPDATE webhook_deliveries SET last_error = NULL WHERE id = $1", [deliveryId]);
    await t.pool.query("UPDATE webhook_deliveries SET next_attempt_at = NULL WHERE id = $1", [deliveryId]);

    expect(await deliver(deliveryId!)).toMatchObject({ kind: "delivered" });
    const [post] = receiver.received;
    expect(verifyWebhook(target.secret, post!.body, post!.headers)).toMatchObject({ type: "webhook.test" });
    const delivered = await browser.get(location);
    expect(delivered.text).toMatch(/<span class="state state-delivered">delivered<\/span>/);
    expect(delivered.text).toMatch(
      /<h2>Attempts \(1\)<\/h2><div class="scroll"><table class="attempts stack">.*<td class="num" data-label="status">200<\/td>/,
    );
    expect(delivered.text).not.toMatch(/http-equiv="refresh"/);
    // Focused on load, so a screen reader reads what the action did.
    expect(delivered.text).toContain(
      '<p class="notice" role="status" id="notice" tabindex="-1" autofocus="">Test event sent. It was delivered.</p>',
    );
    // Said once it has ended, either way: "Test event sent." alone stood above a delivery that gave up.
    await t.pool.query("UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1", [
      deliveryId,
    ]);
    expect((await browser.get(location)).text).toContain(
      "Test event sent. It gave up: see its attempts below.",
    );

    const list = await browser.get(`/dashboard/webhooks/${target.id}`);
    expect(list.text).toContain(`<a href="/dashboard/webhooks/deliveries/${deliveryId}">webhook.test</a>`);
    expect(list.text).not.toContain('href="/dashboard/events/');
  });

  it("needs a session, refuses a cross-site post and a disabled endpoint, and creates nothing then", async () => {
    const target = await endpoint("/target");
    const stranger = dashboardClient(() => env);
    expect((await stranger.post(`/dashboard/webhooks/${target.id}/test`, {})).status).toBe(401);
    expect((await browser.post(`/dashboard/webhooks/${target.id}/test`, {}, EVIL)).status).toBe(403);
    const off = await endpoint("/off", null, false);
    const refused = await browser.post(`/dashboard/webhooks/${off.id}/test`, {});
    expect(refused.status).toBe(409);
    expect(refused.text).toContain("enable it first");
    expect(await rows(target.id)).toEqual([]);
    expect(await rows(off.id)).toEqual([]);
    expect(qstash.messages()).toHaveLength(0);
    // A disabled endpoint's page offers none of the delivery actions.
    const page = await browser.get(`/dashboard/webhooks/${off.id}`);
    expect(page.text).not.toContain("/test");
    expect(page.text).not.toContain("/recover");
    expect(page.text).not.toContain("/redeliver");
    expect((await browser.post(`/dashboard/webhooks/${crypto.randomUUID()}/test`, {})).status).toBe(404);
  });
});

describe("redeliver", () => {
  it("puts a failed delivery back to pending with a new job, and its page says so", async () => {
    const ep = await endpoint("/again");
    const id = await delivery(ep.id, "failed");
    const list = await browser.get(`/dashboard/webhooks/${ep.id}`);
    expect(list.text).toContain(`action="/dashboard/webhooks/deliveries/${id}/redeliver"`);

    const res = await browser.post(`/dashboard/webhooks/deliveries/${id}/redeliver`, {});
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe(`/dashboard/webhooks/deliveries/${id}?redelivered=1`);
    const [row] = await rows(ep.id);
    expect(row).toMatchObject({ status: "pending" });
    expect(row!.message_id).toBe(publishedFor(id)[0]!.messageId);

    const page = await browser.get(res.headers.get("location")!);
    expect(page.text).toContain("Queued again: back to pending, sent by a new job.");
    expect(page.text).toMatch(/<span class="state state-pending">pending<\/span>/);
    const { rows: events } = await t.pool.query(`SELECT event_id FROM webhook_deliveries WHERE id = $1`, [
      id,
    ]);
    expect(page.text).toContain(`href="/dashboard/events/${events[0].event_id}"`);
  });

  it("needs a session and refuses a cross-site post, changing nothing", async () => {
    const ep = await endpoint("/again");
    const id = await delivery(ep.id, "failed");
    const stranger = dashboardClient(() => env);
    expect((await stranger.post(`/dashboard/webhooks/deliveries/${id}/redeliver`, {})).status).toBe(401);
    expect((await browser.post(`/dashboard/webhooks/deliveries/${id}/redeliver`, {}, EVIL)).status).toBe(403);
    expect(await rows(ep.id)).toEqual([expect.objectContaining({ status: "failed", message_id: null })]);
    expect(publishedFor(id)).toHaveLength(0);
    const unknown = crypto.randomUUID();
    expect((await browser.post(`/dashboard/webhooks/deliveries/${unknown}/redeliver`, {})).status).toBe(404);
    expect((await browser.get(`/dashboard/webhooks/deliveries/${unknown}`)).status).toBe(404);
  });
});

describe("recover since a time", () => {
  it("re-sends this endpoint's deliveries that gave up or wait for a retry since then, of its own scope only", async () => {
    const mine = await endpoint("/mine", "acme");
    const theirs = await endpoint("/theirs", "globex");
    const old = await delivery(mine.id, "failed");
    await t.pool.query(`UPDATE webhook_deliveries SET created_at = now() - interval '2 days' WHERE id = $1`, [
      old,
    ]);
    const recent = [await delivery(mine.id, "failed"), await delivery(mine.id, "failed")];
    const done = await delivery(mine.id, "delivered");
    // Attempted, and waiting for QStash's next retry: sent now too.
    const retrying = await delivery(mine.id, "pending");
    await t.pool.query(
      `UPDATE webhook_deliveries SET attempts = 3, next_attempt_at = now() + interval '2 hours' WHERE id = $1`,
      [retrying],
    );
    // A row of another scope under this endpoint (only by hand): recovering must not send it.
    const stray = await delivery(mine.id, "failed", "globex");
    const foreign = await delivery(theirs.id, "failed");

    const page = await browser.get(`/dashboard/webhooks/${mine.id}`);
    expect(page.text).toMatch(
      /<input id="since" type="datetime-local" name="since" value="\d{4}-\d\d-\d\dT\d\d:\d\d" required=""\/>/,
    );
    // What is owed, beside a health that may read "healthy" once the receiver is back.
    expect(page.text).toContain(
      '<th>gave up</th><td class="error">4 deliveries not sent: Recover deliveries sends them again</td>',
    );
    const since = new Date(Date.now() - 86_400_000).toISOString().slice(0, 16);
    const res = await browser.post(`/dashboard/webhooks/${mine.id}/recover`, { since });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe(`/dashboard/webhooks/${mine.id}?recovered=3&retrying=1`);

    const status = Object.fromEntries((await rows(mine.id)).map((r) => [r.id, r.status]));
    expect(status).toEqual({
      [old]: "failed",
      [recent[0]!]: "pending",
      [recent[1]!]: "pending",
      [done]: "delivered",
      [retrying]: "pending",
      [stray]: "failed",
    });
    expect(await rows(theirs.id)).toEqual([expect.objectContaining({ status: "failed", message_id: null })]);
    for (const id of [...recent, retrying]) expect(publishedFor(id)).toHaveLength(1);
    for (const id of [old, stray, foreign, done]) expect(publishedFor(id)).toHaveLength(0);

    const after = await browser.get(res.headers.get("location")!);
    expect(after.text).toContain(
      "Recovered 3 deliveries (2 that gave up, 1 waiting for a retry): back to pending, each sent now by a new job.",
    );
    expect([...after.text.matchAll(/state-pending">pending</g)]).toHaveLength(3);
    expect(after.text).toContain("<th>pending</th><td>3</td>");
    expect(after.text).toContain('<th>gave up</th><td class="error">2 deliveries not sent:');

    const again = await browser.post(`/dashboard/webhooks/${mine.id}/recover`, { since });
    expect(again.headers.get("location")).toBe(`/dashboard/webhooks/${mine.id}?recovered=0&retrying=0`);
    expect((await browser.get(again.headers.get("location")!)).text).toContain(
      "No delivery since that time gave up or waits for a retry: nothing to recover.",
    );
  });

  it("needs a session, a time, and a same-site post, changing nothing otherwise", async () => {
    const ep = await endpoint("/mine");
    const id = await delivery(ep.id, "failed");
    const since = "2020-01-01T00:00";
    const stranger = dashboardClient(() => env);
    expect((await stranger.post(`/dashboard/webhooks/${ep.id}/recover`, { since })).status).toBe(401);
    expect((await browser.post(`/dashboard/webhooks/${ep.id}/recover`, { since }, EVIL)).status).toBe(403);
    const bad = await browser.post(`/dashboard/webhooks/${ep.id}/recover`, { since: "yesterday" });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain("since: must be a date and time, e.g. 2026-12-03T08:00");
    // No time at all is said to be required, not to be a malformed one.
    for (const form of [{}, { since: "" }, { since: "  " }] as Record<string, string>[]) {
      const none = await browser.post(`/dashboard/webhooks/${ep.id}/recover`, form);
      expect(none.status, JSON.stringify(form)).toBe(400);
      expect(none.text, JSON.stringify(form)).toContain(
        "since: is required: a date and time, e.g. 2026-12-03T08:00",
      );
    }
    expect(await rows(ep.id)).toEqual([expect.objectContaining({ status: "failed", message_id: null })]);
    expect(publishedFor(id)).toHaveLength(0);
  });

  it("notices are fixed texts chosen by a number: a link cannot put words on the page", async () => {
    const ep = await endpoint("/mine");
    const words = encodeURIComponent("Call +1 555 0100 now");
    expect((await browser.get(`/dashboard/webhooks/${ep.id}?recovered=${words}`)).status).toBe(400);
    const id = await delivery(ep.id, "failed");
    for (const path of [
      `/dashboard/webhooks/${ep.id}?notice=${words}`,
      `/dashboard/webhooks/deliveries/${id}?tested=${words}`,
    ]) {
      const page = await browser.get(path);
      expect(page.status, path).toBe(200);
      expect(page.text, path).not.toContain("555 0100");
    }
  });
});

describe("an endpoint's deliveries", () => {
  const listed = (text: string) =>
    [
      ...text.matchAll(
        /<td class="time" data-label="created"><a href="\/dashboard\/webhooks\/deliveries\/([0-9a-f-]{36})">/g,
      ),
    ].map((m) => m[1]);
  const nextLink = (text: string) => /<a rel="next" href="([^"]+)"/.exec(text)?.[1]?.replace(/&amp;/g, "&");

  it("page by (created_at, id), newest first: ties split exactly, and a delivery made meanwhile shifts nothing", async () => {
    const ep = await endpoint("/many");
    // 120 deliveries, 40 of them created in the same microsecond.
    await t.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, created_at)
       SELECT $1, gen_random_uuid(), 'supplier.connected', '{}',
              CASE WHEN n <= 40 THEN '2026-12-01T10:00:00.123456Z'::timestamptz
                   ELSE '2026-12-01T10:00:00Z'::timestamptz + make_interval(secs => n) END
         FROM generate_series(1, 120) AS n`,
      [ep.id],
    );
    const { rows: all } = await t.pool.query(
      `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at DESC, id DESC`,
      [ep.id],
    );
    const ids = all.map((r) => r.id as string);

    const first = await browser.get(`/dashboard/webhooks/${ep.id}`);
    expect(listed(first.text)).toEqual(ids.slice(0, 50));
    await delivery(ep.id, "pending");
    const second = await browser.get(nextLink(first.text)!);
    expect(second.status).toBe(200);
    expect(listed(second.text)).toEqual(ids.slice(50, 100));
    expect(second.text).toContain(`<a href="/dashboard/webhooks/${ep.id}">« newest</a>`);
    const third = await browser.get(nextLink(second.text)!);
    expect(listed(third.text)).toEqual(ids.slice(100));
    expect(nextLink(third.text)).toBeUndefined();

    expect((await browser.get(`/dashboard/webhooks/${ep.id}?before=5`)).status).toBe(400);
  });

  it("reach every attempt of a delivery through its page", async () => {
    const ep = await endpoint("/flaky");
    const id = await delivery(ep.id, "failed");
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status, error, response_body)
       SELECT $1, now() - make_interval(mins => 10 - n), 30, CASE WHEN n % 3 = 0 THEN NULL ELSE 500 + n END,
              CASE WHEN n % 3 = 0 THEN 'timeout' END, 'try ' || n || ' <b>busy</b>'
         FROM generate_series(1, 8) AS n`,
      [id],
    );
    const list = await browser.get(`/dashboard/webhooks/${ep.id}`);
    expect(list.text).toContain(`<a href="/dashboard/webhooks/deliveries/${id}">`);
    const page = await browser.get(`/dashboard/webhooks/deliveries/${id}`);
    expect(page.text).toContain("<h2>Attempts (8)</h2>");
    const tries = [
      ...page.text.matchAll(
        /<td class="mono" data-label="response \(first 2 KB\)">try (\d) &lt;b&gt;busy&lt;\/b&gt;<\/td>/g,
      ),
    ].map((m) => Number(m[1]));
    expect(tries).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(page.text).toContain(`<a href="/dashboard/webhooks/${ep.id}">`);
    expect(page.text).not.toContain("<b>busy</b>");

    // What the receiver's headers said is shown with its body (escaped like it).
    await t.pool.query(
      `UPDATE webhook_attempts SET response_headers = '{"retry-after": "600", "location": "/x?<y>"}'::jsonb
        WHERE delivery_id = $1 AND response_body = 'try 2 <b>busy</b>'`,
      [id],
    );
    expect((await browser.get(`/dashboard/webhooks/deliveries/${id}`)).text).toContain(
      '<td class="mono" data-label="response (first 2 KB)"><div class="muted">retry-after: 600, location: /x?&lt;y&gt;</div>try 2 &lt;b&gt;busy&lt;/b&gt;</td>',
    );
  });

  it("says an attempt whose Worker stopped left no record, and counts it", async () => {
    const ep = await endpoint("/stopped");
    const id = await delivery(ep.id, "failed");
    await t.pool.query("UPDATE webhook_deliveries SET attempts = 2 WHERE id = $1", [id]);
    await t.pool.query(
      "INSERT INTO webhook_attempts (delivery_id, duration_ms, status) VALUES ($1, 20, 503)",
      [id],
    );
    const page = await browser.get(`/dashboard/webhooks/deliveries/${id}`);
    expect(page.text).toContain("<h2>Attempts (2)</h2>");
    expect(page.text).toContain(
      "1 attempt left no record: the Worker stopped during it, and the receiver may have got the POST.",
    );
  });

  it("says an attempt still waiting for the receiver is in progress, not lost", async () => {
    const ep = await endpoint("/slow");
    const id = await delivery(ep.id, "pending");
    // The second attempt holds the lease (its POST is out); the first has its row.
    await t.pool.query(
      "UPDATE webhook_deliveries SET attempts = 2, lease_until = now() + interval '50 seconds' WHERE id = $1",
      [id],
    );
    await t.pool.query(
      "INSERT INTO webhook_attempts (delivery_id, duration_ms, status) VALUES ($1, 20, 503)",
      [id],
    );
    const going = await browser.get(`/dashboard/webhooks/deliveries/${id}`);
    expect(going.text).toContain("<h2>Attempts (2)</h2>");
    expect(going.text).toContain("1 attempt in progress: the receiver has not answered yet.");
    expect(going.text).not.toContain("left no record");
    // Three counted, two rows, the lease held: one in progress and one lost before it.
    await t.pool.query("UPDATE webhook_deliveries SET attempts = 3 WHERE id = $1", [id]);
    expect((await browser.get(`/dashboard/webhooks/deliveries/${id}`)).text).toContain(
      "1 attempt in progress: the receiver has not answered yet; 1 earlier attempt left no record: the Worker stopped during it, and the receiver may have got the POST.",
    );
    // Once the lease has run out with no row, the Worker that held it stopped.
    await t.pool.query(
      "UPDATE webhook_deliveries SET attempts = 2, lease_until = now() - interval '1 second' WHERE id = $1",
      [id],
    );
    const stopped = await browser.get(`/dashboard/webhooks/deliveries/${id}`);
    expect(stopped.text).toContain("1 attempt left no record: the Worker stopped during it");
    expect(stopped.text).not.toContain("in progress");
  });

  it("a failed test delivery on the overview links to its delivery, never to a missing event", async () => {
    const ep = await endpoint("/tested");
    const sent = await browser.post(`/dashboard/webhooks/${ep.id}/test`, {});
    const deliveryId = /deliveries\/([0-9a-f-]{36})/.exec(sent.headers.get("location")!)![1]!;
    await t.pool.query(`UPDATE webhook_deliveries SET status = 'failed', failed_at = now() WHERE id = $1`, [
      deliveryId,
    ]);
    const overview = await browser.get("/dashboard");
    const link = new RegExp(`<a href="([^"]+)">webhook\\.test</a>`).exec(overview.text)![1]!;
    expect(link).toBe(`/dashboard/webhooks/deliveries/${deliveryId}`);
    expect((await browser.get(link)).status).toBe(200);
  });
});

describe("editing an endpoint from its page", () => {
  const versionOf = (html: string) => /name="version" value="([0-9a-f]{64})"/.exec(html)![1]!;
  const read = async (id: string) =>
    (await t.pool.query("SELECT url, types, description, scope FROM webhook_endpoints WHERE id = $1", [id]))
      .rows[0];

  it("saves a new URL, event types and description, under the same rules as the API", async () => {
    const e = await endpoint("/old", "tenant-a");
    // The receiver is http on 127.0.0.1, as under `npm run dev`, which allows it.
    const local = dashboardClient(() => ({ ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "true" }));
    expect((await local.login()).status).toBe(303);
    const page = await local.get(`/dashboard/webhooks/${e.id}`);
    expect(page.text).toContain(
      `<input id="url" type="url" name="url" value="${receiver.url("/old")}" required=""/>`,
    );

    const saved = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version: versionOf(page.text),
      url: receiver.url("/new"),
      types: "supplier.*, corpus.note.updated  ledger.*",
      description: "the fixed receiver",
    });

    expect(saved.status).toBe(303);
    expect(saved.headers.get("location")).toBe(`/dashboard/webhooks/${e.id}?edited=1`);
    expect(await read(e.id)).toEqual({
      url: receiver.url("/new"),
      types: ["supplier.*", "corpus.note.updated", "ledger.*"],
      description: "the fixed receiver",
      // Never changed by an edit.
      scope: "tenant-a",
    });
    expect((await local.get(saved.headers.get("location")!)).text).toContain("Endpoint saved");
  });

  it("holds a description's line breaks in the form, and stores a browser's CRLF as LF", async () => {
    const e = await endpoint("/lines");
    await t.pool.query("UPDATE webhook_endpoints SET description = $2 WHERE id = $1", [e.id, "one\n<two>"]);
    const local = dashboardClient(() => ({ ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "true" }));
    expect((await local.login()).status).toBe(303);
    const page = await local.get(`/dashboard/webhooks/${e.id}`);
    // A textarea keeps the break (a one-line input's value loses it), escaped as text.
    expect(page.text).toContain('name="description" rows="3" maxlength="500">one\n&lt;two&gt;</textarea>');
    const saved = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version: versionOf(page.text),
      url: receiver.url("/lines"),
      types: "*",
      description: "one\r\n<two>\r\nthree",
    });
    expect(saved.status).toBe(303);
    expect((await read(e.id)).description).toBe("one\n<two>\nthree");
    // A NUL is refused as every other form refuses it: it was saved, percent-encoded, in the URL.
    const nul = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version: versionOf((await local.get(`/dashboard/webhooks/${e.id}`)).text),
      url: `${receiver.url("/lines")}\u0000`,
      types: "*",
    });
    expect(nul.status).toBe(400);
    expect(nul.text).toContain("url: must not contain NUL");
    expect((await read(e.id)).url).toBe(receiver.url("/lines"));
  });

  it("a form saved after someone else's change is refused, and changes nothing", async () => {
    const e = await endpoint("/stale");
    const local = dashboardClient(() => ({ ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "true" }));
    expect((await local.login()).status).toBe(303);
    const version = versionOf((await local.get(`/dashboard/webhooks/${e.id}`)).text);
    // Meanwhile another operator narrows its event types.
    await t.pool.query("UPDATE webhook_endpoints SET types = '{supplier.*}' WHERE id = $1", [e.id]);
    const before = await read(e.id);
    const stale = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version,
      url: receiver.url("/stale"),
      types: "*",
      description: "typed in the old tab",
    });
    expect(stale.status).toBe(409);
    expect(stale.text).toContain(
      "It was changed since this form was opened (in another tab, or by someone else); nothing was saved.",
    );
    expect(await read(e.id)).toEqual(before);
    // What it has now, then what was typed, in a form that saves over it when pressed again:
    // the typed values were gone, and the page's one link led to the overview.
    expect(stale.text).toContain('<th>types</th><td class="mono">supplier.*</td>');
    expect(stale.text).toContain(">typed in the old tab</textarea>");
    expect(stale.text).toContain(`<a href="/dashboard/webhooks/${e.id}">Back to the endpoint, unchanged</a>`);
    const again = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version: versionOf(stale.text),
      url: receiver.url("/stale"),
      types: "*",
      description: "typed in the old tab",
    });
    expect(again.status).toBe(303);
    expect(await read(e.id)).toMatchObject({ types: ["*"], description: "typed in the old tab" });
    await t.pool.query(
      "UPDATE webhook_endpoints SET types = '{supplier.*}', description = '' WHERE id = $1",
      [e.id],
    );
    // Enabling or disabling is not an edit of these fields: a form shown before still saves.
    const fresh = versionOf((await local.get(`/dashboard/webhooks/${e.id}`)).text);
    await local.post(`/dashboard/webhooks/${e.id}/enabled`, { enabled: "false" });
    const saved = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      version: fresh,
      url: receiver.url("/stale"),
      types: "*",
      description: "",
    });
    expect(saved.status).toBe(303);
    expect((await read(e.id)).types).toEqual(["*"]);
    // A form without its version is refused.
    const bare = await local.post(`/dashboard/webhooks/${e.id}/edit`, {
      url: receiver.url("/x"),
      types: "*",
    });
    expect(bare.status).toBe(400);
    expect((await read(e.id)).url).toBe(receiver.url("/stale"));
  });

  it("refuses a bad value with a page naming the field, and changes nothing", async () => {
    const e = await endpoint("/keep");
    const before = await read(e.id);
    // These bindings leave WEBHOOK_ALLOW_PRIVATE_URLS at its default: private addresses refused.
    const strict = browser;
    const cases: [Record<string, string>, RegExp][] = [
      [{ url: "http://127.0.0.1:9/x", types: "*", description: "" }, /endpoint not saved: url: /],
      [{ url: "not a url", types: "*", description: "" }, /endpoint not saved: url: /],
      [
        { url: "https://hooks.example/keep", types: "supplier.*, bad/type", description: "" },
        // Named by the glob, not "types.1" of a list counted from zero; code quoted as text, not in backticks.
        /endpoint not saved: types: &quot;bad\/type&quot; must be an event-type glob: lower-case letters, digits, “_”, “\.”, “-” and “\*”/,
      ],
    ];
    const version = versionOf((await strict.get(`/dashboard/webhooks/${e.id}`)).text);
    for (const [form, message] of cases) {
      const res = await strict.post(`/dashboard/webhooks/${e.id}/edit`, { ...form, version });
      expect(res.status, JSON.stringify(form)).toBe(400);
      expect(res.text, JSON.stringify(form)).toMatch(message);
    }
    expect(await read(e.id)).toEqual(before);
    // And only from this site, with a session.
    expect(
      (await browser.post(`/dashboard/webhooks/${e.id}/edit`, { url: receiver.url("/x") }, EVIL)).status,
    ).toBe(403);
    expect((await dashboardClient(() => env).post(`/dashboard/webhooks/${e.id}/edit`, {})).status).toBe(401);
    expect(await read(e.id)).toEqual(before);
    // The refused page holds the form again, open, with what was sent: a long list of
    // globs is not lost to one typo (Back does not restore a no-store page).
    const refused = await strict.post(`/dashboard/webhooks/${e.id}/edit`, {
      version,
      url: "https://hooks.example/keep",
      types: "supplier.*, note.created, bad/type",
      description: "two\r\nlines",
    });
    expect(refused.status).toBe(400);
    expect(refused.text).toContain('<details class="edit" open="">');
    expect(refused.text).toContain(`action="/dashboard/webhooks/${e.id}/edit"`);
    expect(refused.text).toContain(`name="version" value="${version}"`);
    expect(refused.text).toContain('name="url" value="https://hooks.example/keep"');
    expect(refused.text).toContain('name="types" value="supplier.*, note.created, bad/type"');
    expect(refused.text).toContain('maxlength="500">two\nlines</textarea>');
    expect(refused.text).toContain(`<a href="/dashboard/webhooks/${e.id}">`);
    // Saved from there once fixed.
    const fixed = await strict.post(`/dashboard/webhooks/${e.id}/edit`, {
      version,
      url: "https://hooks.example/keep",
      types: "supplier.*, note.created",
      description: "",
    });
    expect(fixed.status).toBe(303);
    expect((await read(e.id)).types).toEqual(["supplier.*", "note.created"]);
  });
});

describe("a delivery's attempts after its endpoint's URL changed", () => {
  it("say where each was sent, on the delivery's page and the event's", async () => {
    const { id: endpointId } = await endpoint("/before-the-move");
    const id = await delivery(endpointId, "pending");
    receiver.state.respond = () => ({ status: 500 });
    await deliver(id);
    await t.pool.query("UPDATE webhook_endpoints SET url = $2 WHERE id = $1", [
      endpointId,
      receiver.url("/after"),
    ]);
    receiver.state.respond = () => ({ status: 200 });
    await deliver(id);

    const page = (await browser.get(`/dashboard/webhooks/deliveries/${id}`)).text;
    expect(page).toContain("<th>sent to</th>");
    expect(page).toContain(`<td class="mono" data-label="sent to">${receiver.url("/before-the-move")}</td>`);
    expect(page).toContain(`<td class="mono" data-label="sent to">${receiver.url("/after")}</td>`);
    const { rows } = await t.pool.query("SELECT event_id FROM webhook_deliveries WHERE id = $1", [id]);
    expect((await browser.get(`/dashboard/events/${rows[0].event_id}`)).text).toContain(
      `<td class="mono" data-label="sent to">${receiver.url("/before-the-move")}</td>`,
    );

    // One that never moved shows no such column.
    const { id: still } = await endpoint("/never-moved");
    const other = await delivery(still, "pending");
    await deliver(other);
    expect((await browser.get(`/dashboard/webhooks/deliveries/${other}`)).text).not.toContain("sent to");
  });
});

describe("an endpoint that does not keep up", () => {
  it("is lagging on the list and its page, its waiting deliveries queued, not overdue", async () => {
    const { id: endpointId } = await endpoint("/slow-receiver");
    const id = await delivery(endpointId, "pending");
    await t.pool.query(
      "UPDATE webhook_deliveries SET created_at = now() - interval '40 minutes', requested_at = now() - interval '40 minutes' WHERE id = $1",
      [id],
    );
    await evaluateEndpointLag(t.db as unknown as Db, { now: new Date() });

    const list = (await browser.get("/dashboard/webhooks")).text;
    expect(list).toMatch(
      /<span class="state state-pending">lagging<\/span>\s*<div class="muted">1 waiting<\/div>/,
    );
    const page = (await browser.get(`/dashboard/webhooks/${endpointId}`)).text;
    expect(page).toContain("it does not keep up: 1 delivery waits for a first attempt, the oldest since ");
    expect(page).toContain(
      'title="waiting for its first attempt: the endpoint does not keep up">queued since ',
    );
    expect(page).not.toContain("overdue since");
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now() WHERE id = $1",
      [id],
    );
    await evaluateEndpointLag(t.db as unknown as Db, { now: new Date() });
    expect((await browser.get(`/dashboard/webhooks/${endpointId}`)).text).not.toContain("lagging");
  });
});

describe("the endpoint page flags overdue deliveries", () => {
  it("shows a pending delivery past due by more than five minutes, and no other", async () => {
    const e = await endpoint("/late");
    const set = async (id: string, sqlSet: string) =>
      t.pool.query(`UPDATE webhook_deliveries SET ${sqlSet} WHERE id = $1`, [id]);
    const late = await delivery(e.id, "pending");
    await set(late, "next_attempt_at = now() - interval '20 minutes'");
    const neverTried = await delivery(e.id, "pending");
    await set(neverTried, "next_attempt_at = NULL, requested_at = now() - interval '1 hour'");
    const soon = await delivery(e.id, "pending");
    await set(soon, "next_attempt_at = now() + interval '10 minutes'");
    const justLate = await delivery(e.id, "pending");
    await set(justLate, "next_attempt_at = now() - interval '2 minutes'");
    const underWay = await delivery(e.id, "pending");
    await set(
      underWay,
      "next_attempt_at = now() - interval '20 minutes', lease_until = now() + interval '1 minute'",
    );
    const done = await delivery(e.id, "delivered");
    await set(done, "next_attempt_at = now() - interval '20 minutes'");

    const html = (await browser.get(`/dashboard/webhooks/${e.id}`)).text;
    const rowOf = (id: string) => {
      const at = html.indexOf(`/dashboard/webhooks/deliveries/${id}`);
      return html.slice(at, html.indexOf("</tr>", at));
    };
    expect(rowOf(late)).toContain("overdue since");
    expect(rowOf(neverTried)).toContain("overdue since");
    for (const id of [soon, justLate, underWay, done]) expect(rowOf(id), id).not.toContain("overdue");
  });
});

describe("when QStash does not take the job", () => {
  it("the buttons and the admin routes answer 503 saying nothing changed; asking again works", async () => {
    const ep = await endpoint("/flaky");
    const id = await delivery(ep.id, "failed");
    const before = await rows(ep.id);
    const nothingChanged = (what: string) =>
      new RegExp(
        `QStash did not take the deliver job \\(QStash 500: .*\\); nothing changed for ${what}: try again`,
      );
    const app = createApp();
    const admin = (path: string, body?: unknown) =>
      call(app, env, "POST", path, body, { headers: { Authorization: `Bearer ${env.ADMIN_TOKEN}` } });

    qstash.failNextPublishes(6, 500);
    const test = await browser.post(`/dashboard/webhooks/${ep.id}/test`, {});
    expect(test.status).toBe(503);
    expect(test.text).toMatch(nothingChanged(`webhook endpoint ${ep.id}`));
    const again = await browser.post(`/dashboard/webhooks/deliveries/${id}/redeliver`, {});
    expect(again.status).toBe(503);
    expect(again.text).toMatch(nothingChanged(`delivery ${id}`));
    const recover = await browser.post(`/dashboard/webhooks/${ep.id}/recover`, { since: "2026-01-01T00:00" });
    expect(recover.status).toBe(503);
    expect(recover.text).toMatch(nothingChanged(`the deliveries to recover of webhook endpoint ${ep.id}`));

    const routes = [
      await admin(`/admin/webhooks/endpoints/${ep.id}/test`),
      await admin(`/admin/webhooks/deliveries/${id}/redeliver`),
      await admin(`/admin/webhooks/endpoints/${ep.id}/recover`, { since: "2026-01-01T00:00:00Z" }),
    ];
    for (const res of routes) {
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("1");
      expect(res.body.error).toMatchObject({
        code: "SERVICE_UNAVAILABLE",
        message: expect.stringMatching(nothingChanged(".+")),
      });
    }
    // No test delivery left behind, the failed one failed as it was, nothing in QStash.
    expect(await rows(ep.id)).toEqual(before);
    expect(qstash.messages()).toHaveLength(0);

    // A pending delivery whose job QStash still retries: "nothing changed" must hold
    // for its job and next attempt too. They were left NULL, so its old jobs could all
    // POST again and the sweep published another as if its publish had been lost.
    const live = await delivery(ep.id, "pending");
    const state = `SELECT status, message_id, next_attempt_at, requested_at, lease_until, last_error
                     FROM webhook_deliveries WHERE id = $1`;
    await t.pool.query(
      `UPDATE webhook_deliveries SET message_id = 'msg_still_retrying', attempts = 3, last_error = 'endpoint answered 503',
              next_attempt_at = now() + interval '7 minutes', requested_at = now() - interval '1 hour',
              lease_until = now() - interval '1 minute' WHERE id = $1`,
      [live],
    );
    const liveBefore = (await t.pool.query(state, [live])).rows[0];
    qstash.failNextPublishes(2, 500);
    expect((await browser.post(`/dashboard/webhooks/deliveries/${live}/redeliver`, {})).status).toBe(503);
    expect((await admin(`/admin/webhooks/deliveries/${live}/redeliver`)).status).toBe(503);
    expect((await t.pool.query(state, [live])).rows[0]).toEqual(liveBefore);
    await t.pool.query("DELETE FROM webhook_deliveries WHERE id = $1", [live]);

    const retried = await admin(`/admin/webhooks/deliveries/${id}/redeliver`);
    expect(retried.status).toBe(202);
    expect(publishedFor(id)).toHaveLength(1);
  });
});

describe("adding an endpoint", () => {
  const formOf = (html: string) => ({
    id: /<input type="hidden" name="id" value="([0-9a-f-]{36})"\/>/.exec(html)?.[1] ?? "",
  });

  it("makes it from the Webhooks page, shows its secret once, and the secret signs what it is sent", async () => {
    await t.pool.query(
      `INSERT INTO api_keys (scope, name, prefix, key_hash) VALUES ('acme', 'acme', 'eo_x', md5(random()::text))`,
    );
    // As under `npm run dev`, so the receiver on 127.0.0.1 is a URL it takes.
    const local = dashboardClient(() => ({ ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "true" }));
    expect((await local.login()).status).toBe(303);
    const list = await local.get("/dashboard/webhooks");
    // Open while there is no endpoint, with the scopes of the API keys offered.
    expect(list.text).toContain('<details class="edit" open=""><summary>Add an endpoint</summary>');
    expect(list.text).toContain('<datalist id="known-scopes"><option value="acme"></option></datalist>');
    const { id } = formOf(list.text);
    expect(id).not.toBe("");

    const form = {
      id,
      url: receiver.url("/made-here"),
      types: "supplier.*, webhook.test",
      scope: " acme ",
      description: "ERP sync\r\nowner: payments",
    };
    const made = await local.post("/dashboard/webhooks", form);
    expect(made.status).toBe(201);
    const secret = /<pre id="secret" tabindex="0" autofocus="">(whsec_[^<]+)<\/pre>/.exec(made.text)?.[1];
    expect(secret).toBeDefined();
    const { rows } = await t.pool.query(
      "SELECT id, url, types, scope, description, enabled FROM webhook_endpoints",
    );
    expect(rows).toEqual([
      {
        id,
        url: receiver.url("/made-here"),
        types: ["supplier.*", "webhook.test"],
        scope: "acme",
        description: "ERP sync\nowner: payments",
        enabled: true,
      },
    ]);

    // The receiver verifies what it is sent with that secret, by the independent package.
    const test = await local.post(`/dashboard/webhooks/${id}/test`, {});
    const deliveryId = /deliveries\/([0-9a-f-]{36})/.exec(test.headers.get("location") ?? "")?.[1];
    expect(await deliver(deliveryId!)).toMatchObject({ kind: "delivered" });
    const [post] = receiver.received;
    expect(verifyWebhook(secret!, post!.body, post!.headers)).toMatchObject({ type: "webhook.test" });

    // The same form again (a reload of the secret's page): nothing made, no secret shown.
    const again = await local.post("/dashboard/webhooks", form);
    expect(again.status).toBe(409);
    expect(again.text).toContain(
      "This form was sent before and made its endpoint then; nothing was added now",
    );
    expect(again.text).not.toContain("whsec_");
    expect((await t.pool.query("SELECT count(*)::int AS n FROM webhook_endpoints")).rows[0].n).toBe(1);
    // Closed once there is one; a new form carries a new id.
    const after = await local.get("/dashboard/webhooks");
    expect(after.text).toContain('<details class="edit"><summary>Add an endpoint</summary>');
    expect(formOf(after.text).id).not.toBe(id);
  });

  it("a refused form comes back open with what was typed and why, and makes nothing", async () => {
    const id = crypto.randomUUID();
    const bad = await browser.post("/dashboard/webhooks", {
      id,
      url: "ftp://hooks.example.com/x",
      types: "Supplier.*",
      scope: "",
      description: "kept",
    });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain("endpoint not added");
    expect(bad.text).toMatch(/url: [^<]*https/);
    expect(bad.text).toContain('<details class="edit" open="">');
    expect(bad.text).toContain(`<input type="hidden" name="id" value="${id}"/>`);
    expect(bad.text).toContain('value="ftp://hooks.example.com/x"');
    expect(bad.text).toContain(">kept</textarea>");
    // The API's URL rules: a deployed Worker takes no private address.
    const local = await browser.post("/dashboard/webhooks", { id, url: receiver.url("/x"), types: "*" });
    expect(local.status).toBe(400);
    expect(local.text).toContain(
      "endpoint not added: url: must use https (http is allowed only with WEBHOOK_ALLOW_PRIVATE_URLS=true)",
    );
    const nul = await browser.post("/dashboard/webhooks", {
      id,
      url: "https://hooks.example.com/\u0000",
      types: "*",
    });
    expect(nul.status).toBe(400);
    expect(nul.text).toContain("url: must not contain NUL");
    const noId = await browser.post("/dashboard/webhooks", {
      url: "https://hooks.example.com/x",
      types: "*",
    });
    expect(noId.status).toBe(400);
    expect((await t.pool.query("SELECT count(*)::int AS n FROM webhook_endpoints")).rows[0].n).toBe(0);
  });

  it("needs a session, a same-site post and WEBHOOK_SECRETS_KEY", async () => {
    const form = { id: crypto.randomUUID(), url: receiver.url("/x"), types: "*" };
    expect((await dashboardClient(() => env).post("/dashboard/webhooks", form)).status).toBe(401);
    expect((await browser.post("/dashboard/webhooks", form, EVIL)).status).toBe(403);
    const saved = env;
    env = { ...env, WEBHOOK_SECRETS_KEY: undefined };
    try {
      const unkeyed = dashboardClient(() => env);
      expect((await unkeyed.login()).status).toBe(303);
      const list = await unkeyed.get("/dashboard/webhooks");
      expect(list.text).not.toContain("Add an endpoint");
      expect(list.text).toContain("Adding an endpoint needs the WEBHOOK_SECRETS_KEY binding");
      const refused = await unkeyed.post("/dashboard/webhooks", form);
      expect(refused.status).toBe(500);
      expect(refused.text).toContain("WEBHOOK_SECRETS_KEY is missing");
    } finally {
      env = saved;
    }
    expect((await t.pool.query("SELECT count(*)::int AS n FROM webhook_endpoints")).rows[0].n).toBe(0);
  });
});
