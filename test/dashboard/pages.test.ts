import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { dashboardClient, poison, stateOf } from "../support/dashboard.ts";
import { useTestDatabase } from "../support/db.ts";
import { poisonEvents, seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";
import { bindings, call } from "../support/worker.ts";
import { createApp } from "../../src/worker/app.ts";
import { clearFailuresSql } from "../../src/outbox/relay/backoff.ts";
import { markAndCommit } from "../../src/outbox/relay/mark.ts";
import { importSecretsKey, newSecretsKey, openSecret } from "../../src/domain/webhooks/secret-box.ts";
import { signingSecrets } from "../../src/domain/webhooks/secrets.ts";
import { waitFor } from "../support/helpers.ts";
import { insertEndpoint } from "../support/webhooks.ts";
import { insertJobFailure } from "../support/job-failures.ts";
import { ALERTS_PAGE } from "../../src/worker/dashboard/pages/alerts.tsx";

// Every page and action, signed in, through the app as the Worker runs it.
const t = useTestDatabase();
let proxy: WsProxy;
let env: Bindings;
let browser: ReturnType<typeof dashboardClient>;
const SCRIPT = "<script>alert(1)</script>";
const ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;";

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  env = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address, WEBHOOK_SECRETS_KEY: newSecretsKey() });
  browser = dashboardClient(() => env);
  expect((await browser.login()).status).toBe(303);
});
afterAll(() => proxy?.close());
beforeEach(async () => {
  await resetOutbox(t.pool);
  await t.pool.query("TRUNCATE job_failures, webhook_endpoints CASCADE");
});

async function endpoint(url = "https://receiver.example/hook"): Promise<string> {
  const { rows } = await t.pool.query(
    `INSERT INTO webhook_endpoints (url, secret_box) VALUES ($1, 'sealed') RETURNING id`,
    [url],
  );
  return rows[0].id;
}

async function delivery(
  endpointId: string,
  eventId: string,
  status: string,
  attempts: [number | null, string | null][],
) {
  const { rows } = await t.pool.query(
    `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts, last_error, failed_at, delivered_at)
     VALUES ($1, $2, 'supplier.connected', '{}', $3, $4, $5,
             CASE WHEN $3 = 'failed' THEN now() END, CASE WHEN $3 = 'delivered' THEN now() END) RETURNING id`,
    [endpointId, eventId, status, attempts.length, status === "failed" ? `receiver said ${SCRIPT}` : null],
  );
  for (const [code, error] of attempts) {
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, duration_ms, status, error, response_body) VALUES ($1, 12, $2, $3, $4)`,
      [rows[0].id, code, error, code ? `body ${code} ${SCRIPT}` : null],
    );
  }
  return rows[0].id as string;
}

/** Marks one event fanned out as a relay pass at `at` would (its mark, in a transaction). */
async function markFannedAt(id: string, at: Date) {
  const { rows } = await t.pool.query<{ seq: string }>(`SELECT seq FROM events WHERE id = $1`, [id]);
  const client = await t.pool.connect();
  try {
    await client.query("BEGIN");
    await markAndCommit(client, [{ seq: Number(rows[0]!.seq), fanout: {} }], clearFailuresSql(at), at);
  } finally {
    client.release();
  }
}

describe("a page that does not exist", () => {
  it("is a 404 page, like the dashboard's other errors, not the API's JSON", async () => {
    const res = await browser.get("/dashboard/nothing/here");
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.text).toContain("<h1>404 Not found</h1>");
    expect(res.text).toContain("no such page in the dashboard");
    // Nothing of the link's own is repeated on the page.
    const crafted = await browser.get("/dashboard/Session%20expired%3A%20sign%20in%20at%20evil.example");
    expect(crafted.status).toBe(404);
    expect(crafted.text).not.toMatch(/Session expired|evil\.example/);
    const badId = await browser.get("/dashboard/events/not-a-uuid%20Call%20support");
    expect(badId.status).toBe(404);
    expect(badId.text).toContain("no such event: its id is not a UUID");
    expect(badId.text).not.toMatch(/Call support/);
    // Signed in, an error page keeps the header's links and says what it is in its title.
    expect(badId.text).toContain('<nav aria-label="Sections">');
    expect(badId.text).toContain("<title>404 Not found · edge-outbox</title>");
    // The message is focused and announced, as an action's notice is.
    expect(badId.text).toContain('<p class="error" role="alert" id="notice" tabindex="-1" autofocus="">');
    // A list with no other page has no empty "Pages" navigation; open and all are titled apart.
    const alertsPage = (await browser.get("/dashboard/alerts")).text;
    expect(alertsPage).not.toContain('aria-label="Pages"');
    expect(alertsPage).toContain("<title>Open alerts · edge-outbox</title>");
    expect((await browser.get("/dashboard/alerts?show=all")).text).toContain(
      "<title>Alerts, resolved too · edge-outbox</title>",
    );
    expect(res.text).toContain('href="/dashboard"');
  });

  it("typed with a trailing slash, /dashboard/ is the dashboard, not a 404 page", async () => {
    const slash = await browser.get("/dashboard/");
    expect(slash.status).toBe(308);
    expect(slash.headers.get("location")).toBe("/dashboard");
  });
});

describe("overview", () => {
  it("shows backlog, lag, poisoned, relay state, alerts, failed jobs and deliveries, charts, and refreshes", async () => {
    await seedEvents(t.pool, 3);
    await seedEvents(t.pool, 2, { fanned: true });
    const id = await poison(t.pool, `QStash 400: ${SCRIPT}`);
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, event_id, message) VALUES ('event.poisoned', $1, $2)`,
      [id, `poisoned ${SCRIPT}`],
    );
    await t.pool.query(
      `INSERT INTO job_failures (message_id, subscription, event_id, status, body) VALUES ('msg_dead', 'notify.mail', $1, 500, '{}')`,
      [id],
    );
    const ep = await endpoint();
    await delivery(ep, id, "failed", [
      [500, null],
      [null, "timeout"],
    ]);
    await delivery(ep, (await seedEvents(t.pool, 1, { fanned: true }))[0]!, "delivered", [[200, null]]);
    // Recorded half an hour ago, fanned a second later, though its seq is the newest;
    // and one from before the hour, which neither line counts. Fanned by the relay's
    // own mark at those times: the chart counts what the mark records (ADR 0016).
    const [late, old] = await seedEvents(t.pool, 2);
    await t.pool.query(`UPDATE events SET created_at = now() - interval '30 minutes' WHERE id = $1`, [late]);
    await t.pool.query(`UPDATE events SET created_at = now() - interval '2 hours' WHERE id = $1`, [old]);
    await markFannedAt(late!, new Date(Date.now() - 1_799_000));
    await markFannedAt(old!, new Date(Date.now() - 7_200_000));
    await t.pool.query(
      `UPDATE outbox_relay_state SET failures = 2, backoff_until = now() + interval '1 minute',
              last_error = $1, last_failure_at = now()`,
      [`QStash unreachable ${SCRIPT}`],
    );

    const page = await browser.get("/dashboard");
    expect(page.status).toBe(200);
    const card = (label: string) =>
      new RegExp(
        `<div class="label">${label}</div><div class="value">(?:<a [^>]*><span class="unseen">${label} </span>)?([^<]+)`,
      ).exec(page.text)?.[1];
    expect(card("Backlog")).toBe("3");
    // Backed off: due, but nothing runs them before the backoff ends.
    expect(card("Due, relay backed off")).toBe("3");
    expect(page.text).toMatch(/<div class="card warn"><div class="label">Due, relay backed off</);
    expect(card("Oldest pending")).toMatch(/^\d+(\.\d)? s$/);
    expect(card("Poisoned")).toBe("1");
    expect(card("Open alerts")).toBe("1");
    expect(card("Relay")).toBe("backing off");
    expect(page.text).toContain(`QStash unreachable ${ESCAPED}`);
    expect(page.text).toContain(`poisoned ${ESCAPED}`);
    expect(page.text).toContain("msg_dead");
    expect(page.text).toContain("https://receiver.example/hook");
    expect(page.text).toContain(`receiver said ${ESCAPED}`);
    // The deliveries that gave up lead on to where they are sent again; one row is no "newest 10".
    expect(page.text).toContain(
      '<p>Each endpoint&#39;s page counts the deliveries that gave up and sends them again (Recover): <a href="/dashboard/webhooks">Webhooks →</a></p>',
    );
    expect(page.text).not.toContain(SCRIPT);
    // Reloading only when asked: each reload takes keyboard focus back to the top.
    expect(page.text).not.toMatch(/http-equiv="refresh"/);
    expect(page.text).toContain('<p class="live"><a href="/dashboard?live=1">Reload every 5 s</a></p>');
    const live = await browser.get("/dashboard?live=1&retriedAll=3");
    // Reloads without the one-off notice, which would otherwise stay for as long as it runs.
    expect(live.text).toMatch(/<meta http-equiv="refresh" content="5; url=\/dashboard\?live=1"/);
    expect(live.text).toContain(
      '<p class="live"><span>This page reloads every 5 s. </span><a href="/dashboard">Stop reloading</a></p>',
    );
    // Two charts, each a line per series over 60 minutes; this minute has the events recorded above.
    const lines = [...page.text.matchAll(/<polyline [^>]*points="([^"]+)"/g)].map((m) => m[1]!.split(" "));
    expect(lines).toHaveLength(4);
    for (const points of lines) expect(points).toHaveLength(60);
    expect(page.text).toContain("recorded (8 in the hour)");
    expect(page.text).toContain("fanned out (4 in the hour)");
    expect(page.text).toContain("succeeded (1 in the hour)");
    expect(page.text).toContain("failed (2 in the hour)");
  });

  it("says a list of deliveries that gave up is only the newest when it is full", async () => {
    const ep = await endpoint();
    for (const id of await seedEvents(t.pool, 11, { fanned: true })) await delivery(ep, id, "failed", []);
    const page = (await browser.get("/dashboard")).text;
    expect(page).toContain("<p>The newest 10. Each endpoint&#39;s page counts the deliveries that gave up");
  });

  it("says healthy with nothing to show", async () => {
    const page = await browser.get("/dashboard");
    expect(page.text).toMatch(/<div class="label">Relay<\/div><div class="value">healthy</);
    expect(page.text).not.toContain('id="relay"');
  });

  it("says in red when no cron sweep has finished lately, and otherwise when one did and its retention", async () => {
    await t.pool.query("TRUNCATE sweep_runs");
    const never = await browser.get("/dashboard");
    expect(never.text).toContain(
      '<div class="panel" id="sweep"><p class="error">No cron sweep has finished yet. Until one does, lost kicks are not repaired',
    );
    await t.pool.query(
      `INSERT INTO sweep_runs (finished_at, duration_ms, retention_days) VALUES (now() - interval '6 minutes', 38, 30)`,
    );
    const { rows } = await t.pool.query("SELECT finished_at FROM sweep_runs");
    const at = (rows[0] as { finished_at: Date }).finished_at;
    const shown = `${at.toISOString().slice(0, 19).replace("T", " ")}Z`;
    expect((await browser.get("/dashboard")).text).toContain(
      `<p class="error">No cron sweep has finished since ${shown}. Until one does,`,
    );
    await t.pool.query("UPDATE sweep_runs SET finished_at = now() - interval '30 seconds'");
    const fine = await browser.get("/dashboard");
    expect(fine.text).not.toContain('id="sweep"><p class="error">');
    expect(fine.text).toMatch(
      /<p class="muted" id="sweep">Cron sweep finished \S+ \S+ in 38 ms; what has finished \(.*\) is deleted after 30 days \(RETENTION_DAYS\)\.<\/p>/,
    );
    // One failure after a finished run is said, not in red: the next run may not repeat it.
    await t.pool.query(
      `UPDATE sweep_runs SET failed_at = now(), failure = 'in its "relay" step: Connection terminated unexpectedly'`,
    );
    expect((await browser.get("/dashboard")).text).toMatch(
      /<div class="panel" id="sweep"><p>The last sweep failed at [^<]+ in its &quot;relay&quot; step: Connection terminated unexpectedly; the one before finished at [^<]+, and the next one tries again\.<\/p>/,
    );
    await t.pool.query("TRUNCATE sweep_runs");
  });

  it("says whether QStash's jobs reach the Worker, in red when the canary is late", async () => {
    await t.pool.query("TRUNCATE qstash_canaries");
    expect((await browser.get("/dashboard")).text).toContain(
      '<p class="muted" id="canary">Jobs from QStash: no canary sent yet: the cron sweep sends one every 30 min, to tell whether jobs reach this Worker.</p>',
    );
    await t.pool.query(
      `INSERT INTO qstash_canaries (id, sent_at, arrived_at)
       VALUES (gen_random_uuid(), '2026-12-07 11:30:00Z', '2026-12-07 11:30:01Z')`,
    );
    expect((await browser.get("/dashboard")).text).toContain(
      '<p class="muted" id="canary">Jobs from QStash: arriving: the cron sweep&#39;s last canary arrived at 2026-12-07 11:30:01Z.</p>',
    );
    // Two sent since, neither arrived: late (one alone is on its way, or lost to a blip).
    await t.pool.query(
      `INSERT INTO qstash_canaries (id, sent_at)
       VALUES (gen_random_uuid(), now() - interval '7 minutes'), (gen_random_uuid(), now() - interval '2 minutes')`,
    );
    expect((await browser.get("/dashboard")).text).toMatch(
      /<div class="panel" id="canary"><p class="error">Jobs from QStash: NOT ARRIVING: no canary the cron sweep sent through QStash since [^<]+ has reached this Worker, and the last to arrive did at 2026-12-07 11:30:01Z \(the jobs.not_arriving alert says why, as far as QStash knows\)\.<\/p>/,
    );
    await t.pool.query(
      "DELETE FROM qstash_canaries WHERE arrived_at IS NULL AND sent_at < now() - interval '5 minutes'",
    );
    await t.pool.query("UPDATE qstash_canaries SET sent_at = now() WHERE arrived_at IS NULL");
    expect((await browser.get("/dashboard")).text).toMatch(
      /<p class="muted" id="canary">Jobs from QStash: a canary sent at [^<]+ is on its way; the last to arrive did at 2026-12-07 11:30:01Z\.<\/p>/,
    );
    // Another deployment's jobs reaching this Worker is no "arriving" in grey.
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message, details)
       VALUES ('jobs.foreign', '1 canary job of another deployment …', '{"label":"edge-outbox-staging"}')`,
    );
    expect((await browser.get("/dashboard")).text).toMatch(
      /<div class="panel" id="canary"><p class="error">Jobs from QStash: a canary sent at [^<]+ is on its way; the last to arrive did at 2026-12-07 11:30:01Z; and ANOTHER DEPLOYMENT&#39;s jobs reach this Worker too \(1 open jobs.foreign alert names it\)\.<\/p>/,
    );
    await t.pool.query("DELETE FROM outbox_alerts WHERE kind = 'jobs.foreign'");
    await t.pool.query("TRUNCATE qstash_canaries");
  });

  it("shows the jobs QStash holds behind each subscription's limit, as the sweep last read them", async () => {
    const notRead = await browser.get("/dashboard");
    expect(notRead.text).toMatch(
      /<div class="card ok"><div class="label">Waiting in QStash<\/div><div class="value">–</,
    );
    expect(notRead.text).not.toContain('id="waiting"');
    // Two sweeps' readings: webhook.fanout waiting at both, 20 minutes apart.
    await t.pool.query(
      `INSERT INTO subscription_wait_lists
              (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('webhook.fanout', 93012, 10, 10, false, '2026-12-06T12:00:00Z', '2026-12-06T12:20:00Z'),
              ('notify.mail', 0, 10, 0, false, NULL, '2026-12-06T12:20:00Z'),
              ('corpus.index', 4, 10, 10, false, '2026-12-06T12:20:00Z', '2026-12-06T12:20:00Z')`,
    );
    const page = await browser.get("/dashboard");
    // 15 minutes waiting at every reading is what raises subscription.backlogged: "bad".
    expect(page.text).toMatch(
      /<div class="card bad"><div class="label">Waiting in QStash<\/div><div class="value">93016</,
    );
    expect(page.text).toContain(
      "<li>webhook.fanout: 93012 waiting (10 at a time, 10 under way) at every reading since 2026-12-06 12:00:00Z; read at 2026-12-06 12:20:00Z</li>",
    );
    expect(page.text).toContain(
      "<li>corpus.index: 4 waiting (10 at a time, 10 under way); read at 2026-12-06 12:20:00Z</li>",
    );
    expect(page.text).not.toContain("notify.mail: 0");
    expect(page.text).not.toContain("has not read QStash");
    await t.pool.query(
      "UPDATE subscription_wait_lists SET unread_since = '2026-12-06T12:21:00Z', unread_error = 'Network connection lost.'",
    );
    expect((await browser.get("/dashboard")).text).toContain(
      // One stop after a reason that ends its own sentence, not "lost..".
      "The sweep has not read QStash&#39;s wait lists since 2026-12-06 12:21:00Z: Network connection lost. What follows is the last reading.",
    );
    await t.pool.query("UPDATE subscription_wait_lists SET unread_since = NULL, unread_error = NULL");
    await t.pool.query(
      "UPDATE subscription_wait_lists SET waiting = 0, waiting_since = NULL WHERE subscription = 'webhook.fanout'",
    );
    expect((await browser.get("/dashboard")).text).toMatch(
      /<div class="card warn"><div class="label">Waiting in QStash<\/div><div class="value">4</,
    );
  });

  it("does not call an old wait-list reading current while the sweep is late", async () => {
    await t.pool.query(
      `INSERT INTO subscription_wait_lists (subscription, waiting, parallelism, in_flight, paused, checked_at)
       VALUES ('webhook.fanout', 0, 10, 0, false, '2026-12-06T12:20:00Z'),
              ('corpus.index', 0, 10, 0, false, '2026-12-06T12:19:00Z')`,
    );
    await t.pool.query(
      `INSERT INTO sweep_runs (finished_at, duration_ms, retention_days) VALUES (now() - interval '30 seconds', 38, 30)`,
    );
    const fresh = (await browser.get("/dashboard")).text;
    expect(fresh).toMatch(
      /<div class="card ok"><div class="label">Waiting in QStash<\/div><div class="value">0</,
    );
    expect(fresh).not.toContain('id="waiting"');
    // No sweep for an hour: the 0 is an hour old, and the card and a panel say so.
    await t.pool.query("UPDATE sweep_runs SET finished_at = now() - interval '1 hour'");
    const late = (await browser.get("/dashboard")).text;
    expect(late).toMatch(
      /<div class="card warn"><div class="label">Waiting in QStash<\/div><div class="value">0</,
    );
    expect(late).toContain(
      "QStash&#39;s wait lists were last read at 2026-12-06 12:20:00Z, by a sweep; none has finished since, so QStash may hold jobs now.",
    );
    expect(late).toContain("<p>None was waiting then.</p>");
    await t.pool.query("UPDATE subscription_wait_lists SET waiting = 7 WHERE subscription = 'corpus.index'");
    expect((await browser.get("/dashboard")).text).toContain("so QStash may hold more or fewer jobs now.");
    await t.pool.query("TRUNCATE sweep_runs");
  });

  it("warns when private webhook URLs are allowed on a Worker at a public https address", async () => {
    const at = (overrides: Record<string, string>) => dashboardClient(() => ({ ...env, ...overrides }));
    // The local stack: http on 127.0.0.1, where the setting belongs.
    const local = at({ WEBHOOK_ALLOW_PRIVATE_URLS: "true" });
    expect((await local.login()).status).toBe(303);
    expect((await local.get("/dashboard")).text).not.toContain('id="private-urls"');
    const deployed = at({ WEBHOOK_ALLOW_PRIVATE_URLS: "true", PUBLIC_URL: "https://outbox.example.com" });
    expect((await deployed.login()).status).toBe(303);
    expect((await deployed.get("/dashboard")).text).toContain(
      "WEBHOOK_ALLOW_PRIVATE_URLS=true on a Worker at https://outbox.example.com: webhook endpoints may point at private",
    );
    const safe = at({ PUBLIC_URL: "https://outbox.example.com" });
    expect((await safe.login()).status).toBe(303);
    expect((await safe.get("/dashboard")).text).not.toContain('id="private-urls"');
  });

  it("warns while WEBHOOK_SECRETS_KEY is unset: sessions keyed by the token alone, no endpoints", async () => {
    const at = (overrides: Record<string, string | undefined>) =>
      dashboardClient(() => ({ ...env, ...overrides }));
    const keyed = at({});
    expect((await keyed.login()).status).toBe(303);
    expect((await keyed.get("/dashboard")).text).not.toContain('id="no-secrets-key"');
    const unkeyed = at({ WEBHOOK_SECRETS_KEY: undefined });
    expect((await unkeyed.login()).status).toBe(303);
    const page = (await unkeyed.get("/dashboard")).text;
    expect(page).toContain('id="no-secrets-key"');
    expect(page).toContain(
      "WEBHOOK_SECRETS_KEY is not set: dashboard sessions are keyed by ADMIN_TOKEN alone, so a captured session cookie",
    );
  });

  it("says when its open alerts are only the newest, and links to all of them", async () => {
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message)
       SELECT 'job.failed', 'subscription.' || i, 'job ' || i || ' failed' FROM generate_series(1, 12) i`,
    );
    const page = await browser.get("/dashboard");
    // It showed 10 of 22 without saying so, and linked nowhere.
    expect(page.text).toContain('<p class="muted">The newest 10 of 12.</p>');
    expect(page.text).toContain('<a href="/dashboard/alerts">All open alerts →</a>');
    expect([...page.text.matchAll(/<td data-label="kind">job\.failed<\/td>/g)]).toHaveLength(10);
  });
});

describe("overview: storage", () => {
  it("says how large the database is and which tables fill it", async () => {
    const page = (await browser.get("/dashboard")).text;
    expect(page).toMatch(
      /<p class="muted" id="storage">Database: \d+(\.\d)? MB; the largest tables: \w+ \d+(\.\d)? (kB|MB), \w+ [^<]+\.<\/p>/,
    );
  });
});

describe("overview: retries due", () => {
  it("says which failed jobs QStash is to try again, and when, only while there are some", async () => {
    expect((await browser.get("/dashboard")).text).not.toContain('id="retries-due"');
    await t.pool.query(
      `INSERT INTO job_retries_due (message_id, subscription, due_at)
       VALUES ('msg-a', 'notify.mail', '2026-12-06T12:30:00Z'), ('msg-b', 'notify.mail', '2026-12-06T18:00:00Z')`,
    );
    expect((await browser.get("/dashboard")).text).toContain(
      '<div class="panel" id="retries-due"><p>Failed jobs QStash is to try again, per subscription: notify.mail 2 jobs, ' +
        "the next expected by 2026-12-06 12:30:00Z, the last by 2026-12-06 18:00:00Z. Those that run out of retries " +
        "show under job failures.</p></div>",
    );
  });
});

describe("events", () => {
  const seqs = (text: string) =>
    [
      ...text.matchAll(
        /<td class="num mono" data-label="seq"><a href="\/dashboard\/events\/[^"]+">(\d+)<\/a>/g,
      ),
    ].map((m) => Number(m[1]));

  it("pages by seq, newest first, and a row recorded meanwhile does not shift the next page", async () => {
    await seedEvents(t.pool, 120);
    const { rows } = await t.pool.query(`SELECT seq FROM events ORDER BY seq DESC`);
    const all = rows.map((r) => Number(r.seq));

    const first = await browser.get("/dashboard/events");
    expect(first.status).toBe(200);
    expect(seqs(first.text)).toEqual(all.slice(0, 50));
    const next = /<a rel="next" href="([^"]+)"/.exec(first.text)![1]!.replace(/&amp;/g, "&");
    expect(next).toBe(`/dashboard/events?before=${all[49]}`);

    await seedEvents(t.pool, 5);
    const second = await browser.get(next);
    expect(seqs(second.text)).toEqual(all.slice(50, 100));
    const third = await browser.get(
      /<a rel="next" href="([^"]+)"/.exec(second.text)![1]!.replace(/&amp;/g, "&"),
    );
    expect(seqs(third.text)).toEqual(all.slice(100));
    expect(third.text).not.toContain('rel="next"');
  });

  it("filters by state, type glob, subject, scope and time range, and keeps the filters across pages", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.connected", scope: "acme" });
    await seedEvents(t.pool, 2, { type: "supplier_x.connected", scope: "acme" });
    await seedEvents(t.pool, 2, { type: "corpus.note.created", fanned: true, subject: () => "note-1" });
    const poisoned = await poison(t.pool, "bad");
    const { rows } = await t.pool.query(`SELECT seq, type, subject, scope, id FROM events ORDER BY seq DESC`);
    const where = (f: (r: (typeof rows)[number]) => boolean) => rows.filter(f).map((r) => Number(r.seq));

    const get = async (q: string) => seqs((await browser.get(`/dashboard/events?${q}`)).text);
    expect(await get("state=fanned")).toEqual(where((r) => r.type === "corpus.note.created"));
    expect(await get("state=poisoned")).toEqual(where((r) => r.id === poisoned));
    expect(await get("state=pending&type=supplier.*")).toEqual(
      where((r) => r.type === "supplier.connected" && r.id !== poisoned),
    );
    // The glob's `_` is literal, as the core's glob→LIKE makes it.
    expect(await get("type=supplier_*")).toEqual(where((r) => r.type === "supplier_x.connected"));
    expect(await get("subject=note-1")).toEqual(where((r) => r.subject === "note-1"));
    // Each row's subject links to that filter; a UUID is shown by its end, on one line.
    const uuid = "0b7e3c1a-4d2f-4c6b-9a1e-5f8d2c7b6a90";
    await seedEvents(t.pool, 1, { subject: () => uuid });
    const listed = (await browser.get("/dashboard/events")).text;
    expect(listed).toContain(
      '<td class="mono" data-label="subject"><a href="/dashboard/events?subject=note-1">note-1</a></td>',
    );
    expect(listed).toContain(
      `<td class="mono nowrap" data-label="subject"><a href="/dashboard/events?subject=${uuid}" title="${uuid}">…5f8d2c7b6a90</a></td>`,
    );
    await t.pool.query("DELETE FROM events WHERE subject = $1", [uuid]);
    expect(await get("scope=acme&type=*.connected")).toEqual(where((r) => r.scope === "acme"));

    await t.pool.query(
      `UPDATE events SET created_at = '2026-01-01T10:00:00Z' WHERE type = 'supplier_x.connected'`,
    );
    expect(await get("from=2026-01-01T09:59&to=2026-01-01T10:01")).toEqual(
      where((r) => r.type === "supplier_x.connected"),
    );
    expect(await get("to=2026-01-01T09:59")).toEqual([]);

    // "without a scope": the events written with none, kept onto the next page's link.
    expect(await get("unscoped=1")).toEqual(where((r) => r.scope === null));
    expect(await get("unscoped=1&type=supplier.*")).toEqual(
      where((r) => r.scope === null && r.type.startsWith("supplier.")),
    );
    expect((await browser.get("/dashboard/events?unscoped=1")).text).toMatch(
      /<input type="checkbox" name="unscoped" value="1" checked=""\/>/,
    );

    await seedEvents(t.pool, 60, { type: "supplier.connected", scope: "acme" });
    await seedEvents(t.pool, 55, { type: "ledger.posted" });
    const unscoped = await browser.get("/dashboard/events?unscoped=1");
    expect(/<a rel="next" href="([^"]+)"/.exec(unscoped.text)![1]!).toMatch(
      /^\/dashboard\/events\?unscoped=1&amp;before=\d+$/,
    );
    const page = await browser.get("/dashboard/events?type=supplier.*&scope=acme");
    const next = /<a rel="next" href="([^"]+)"/.exec(page.text)![1]!.replace(/&amp;/g, "&");
    expect(next).toMatch(/^\/dashboard\/events\?type=supplier\.\*&scope=acme&before=\d+$/);
  });

  it("says why a page of big events holds fewer rows than a page does", async () => {
    await t.pool.query(
      `INSERT INTO events (type, subject, payload)
       SELECT 'huge.one', 'h' || i, jsonb_build_object('pad', repeat('x', 900000)) FROM generate_series(1, 6) i`,
    );
    try {
      const page = (await browser.get("/dashboard/events?type=huge.one")).text;
      expect(page.match(/<tr>/g)!.length - 1).toBe(5);
      expect(page).toContain(
        "5 events on this page: their payloads fill the 4 MB a page holds. Older ones are on the next.",
      );
      expect(page).toMatch(/<a rel="next" href="\/dashboard\/events\?type=huge\.one&amp;before=\d+"/);
      expect((await browser.get("/dashboard/events?type=supplier.*")).text).not.toContain("a page holds");
    } finally {
      await t.pool.query("DELETE FROM events WHERE type = 'huge.one'");
    }
  });

  it("answers a bad filter with the form again, as typed, each refused field named and marked", async () => {
    const bad = await browser.get(
      "/dashboard/events?state=stuck&from=yesterday&subject=sup_1&type=Bad%20Type",
    );
    expect(bad.status).toBe(400);
    expect(bad.headers.get("content-type")).toMatch(/text\/html/);
    expect(bad.text).toContain("<title>Events: filter refused · edge-outbox</title>");
    // Focused and said, by the names the form gives its fields.
    expect(bad.text).toContain(
      '<div class="alert-box" role="alert" id="notice" tabindex="-1" autofocus=""><p>Nothing was listed: this filter cannot be used.</p>',
    );
    expect(bad.text).toMatch(/<li>state: must be pending, fanned or poisoned<\/li>/);
    expect(bad.text).toMatch(/<li>type \(glob\): must be an event-type glob[^<]*<\/li>/);
    expect(bad.text).toMatch(/<li>from \(UTC\): must be a date and time, e\.g\. 2026-12-03T08:00<\/li>/);
    // The form keeps what was typed; the refused fields are invalid and described by the refusal.
    expect(bad.text).toContain(
      '<input name="type" value="Bad Type" placeholder="supplier.*" aria-invalid="true" aria-describedby="notice"/>',
    );
    expect(bad.text).toContain('<input name="subject" value="sup_1"/>');
    expect(bad.text).toContain('<select name="state" aria-invalid="true" aria-describedby="notice">');
    expect(bad.text).not.toContain("<table");
    const both = await browser.get("/dashboard/events?scope=acme&unscoped=1");
    expect(both.status).toBe(400);
    expect(both.text).toContain("<li>scope: give a scope or tick “without a scope”, not both</li>");
    // A range given backwards: said, not "No events match."
    const backwards = await browser.get("/dashboard/events?from=2026-12-07T12:00&to=2026-12-06T12:00");
    expect(backwards.status).toBe(400);
    expect(backwards.text).toContain(
      "<li>to (UTC): is before “from”: no event can be in that range (swap them)</li>",
    );
    expect(backwards.text).toContain('name="from" value="2026-12-07T12:00"');
    expect(both.text).toContain(
      '<input name="scope" value="acme" aria-invalid="true" aria-describedby="notice"/>',
    );
    const twice = await browser.get("/dashboard/events?state=pending&state=fanned");
    expect(twice.text).toContain("<li>state: must be given once</li>");
  });
});

describe("event detail", () => {
  it("says why an event has no webhook delivery: none taken, or its fan-out job not run yet", async () => {
    const [id] = await seedEvents(t.pool, 1, { fanned: true, scope: "waiting", type: "supplier.created" });
    await t.pool.query(
      `UPDATE events SET fanout = '{"webhook.fanout":{"messageId":"msg_held"}}', fanned_out_at = now() WHERE id = $1`,
      [id],
    );
    const none = await browser.get(`/dashboard/events/${id}`);
    expect(none.text).toContain("Webhook deliveries: none: no enabled endpoint of its scope takes its type.");
    const { id: endpointId } = await insertEndpoint(t.pool, importSecretsKey(env.WEBHOOK_SECRETS_KEY!), {
      url: "https://hooks.example.com/waiting",
      scope: "waiting",
    });
    await t.pool.query("UPDATE webhook_endpoints SET created_at = now() - interval '1 hour' WHERE id = $1", [
      endpointId,
    ]);
    const held = await browser.get(`/dashboard/events/${id}`);
    expect(held.text).toContain(
      "Webhook deliveries: none yet: 1 enabled endpoint of its scope takes its type, and its webhook.fanout job (msg_held) has not made the deliveries",
    );
    // The sweep read the wait lists after the event's jobs were sent: the note names the
    // backlog in the page's own way of writing a time (it wrote an ISO time here).
    await t.pool.query(
      `UPDATE events SET fanout = '{"webhook.fanout":{"messageId":"msg_held"},"notify.mail":{"messageId":"msg_mail"}}',
                         fanned_out_at = '2026-12-06T12:00:00Z' WHERE id = $1`,
      [id],
    );
    await t.pool.query("UPDATE webhook_endpoints SET created_at = '2026-12-06T11:00:00Z' WHERE id = $1", [
      endpointId,
    ]);
    await t.pool.query(
      `INSERT INTO subscription_wait_lists (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('webhook.fanout', 40, 10, 10, false, '2026-12-06T11:50:00Z', '2026-12-06T12:01:00Z'),
              ('notify.mail', 1, 10, 10, true, '2026-12-06T11:50:00Z', '2026-12-06T12:01:00Z')`,
    );
    try {
      const waiting = await browser.get(`/dashboard/events/${id}`);
      expect(waiting.text).toContain(
        "QStash still holds it (40 webhook.fanout jobs waited behind their flow-control limit when the sweep read QStash at 2026-12-06 12:01:00Z).",
      );
      // Every job of the event QStash may still hold says so, a mail's too (only the
      // webhook note did): why a mail has not been sent yet.
      expect(waiting.text).toContain(
        '<td class="mono" data-label="job">QStash msg_mail<div class="muted">may still wait in QStash: 1 notify.mail job waited with QStash delivery paused when the sweep read QStash at 2026-12-06 12:01:00Z</div></td>',
      );
    } finally {
      await t.pool.query("DELETE FROM subscription_wait_lists");
      await t.pool.query("DELETE FROM webhook_endpoints WHERE id = $1", [endpointId]);
    }
  });

  it("says on a pending event's page that it waits for the relay's backoff, while it lasts", async () => {
    const [id] = await seedEvents(t.pool, 1);
    await t.pool.query(
      `UPDATE outbox_relay_state SET failures = 7, backoff_until = '2099-01-01T00:00:00Z',
              last_error = 'PublishError: QStash 503: down' WHERE id = 1`,
    );
    try {
      expect((await browser.get(`/dashboard/events/${id}`)).text).toContain(
        '<p class="error" id="relay-backoff">The relay is backed off until 2099-01-01 00:00:00Z after 7 failed passes ' +
          "(PublishError: QStash 503: down): this event waits for it, uncharged. Once the cause is fixed, " +
          "“npm run outbox -- relay drain --now” ends the wait.</p>",
      );
      // Not on a fanned event's page, nor once the backoff is over.
      await t.pool.query("UPDATE events SET fanned_out_at = now(), fanout = '{}' WHERE id = $1", [id]);
      expect((await browser.get(`/dashboard/events/${id}`)).text).not.toContain('id="relay-backoff"');
      await t.pool.query("UPDATE events SET fanned_out_at = NULL, fanout = NULL WHERE id = $1", [id]);
      await t.pool.query(
        "UPDATE outbox_relay_state SET backoff_until = now() - interval '1 second' WHERE id = 1",
      );
      expect((await browser.get(`/dashboard/events/${id}`)).text).not.toContain('id="relay-backoff"');
    } finally {
      await t.pool.query(
        "UPDATE outbox_relay_state SET failures = 0, backoff_until = NULL, last_error = NULL WHERE id = 1",
      );
    }
  });

  it("shows a large payload's beginning and says where the whole of it is", async () => {
    const [id] = await seedEvents(t.pool, 1, { payloadBytes: 1_000_000 });
    const page = await browser.get(`/dashboard/events/${id}`);
    expect(page.status).toBe(200);
    expect(page.text.length).toBeLessThan(60_000);
    expect(page.text).toMatch(/The first 20,000 of 1,000,0\d\d characters\. The whole payload: /);
    expect(page.text).toContain(`GET /admin/events/${id}`);
    // The relay's tries at the event, not its jobs': said so.
    expect(page.text).toContain("<th>fan-out attempts</th><td>0 failed attempts</td>");
    // An endpoint's one alert names its latest failure's event, so it can be older than the event.
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, event_id, message, created_at)
       SELECT 'webhook.delivery_failed', id, 'endpoint failing', created_at - interval '1 minute' FROM events WHERE id = $1`,
      [id],
    );
    expect((await browser.get(`/dashboard/events/${id}`)).text).toContain(
      'endpoint failing<span class="muted"> (raised for an earlier failure; this event is its latest)</span>',
    );
    // Each event's page has a title of its own, not one per type: tabs and history tell them apart.
    expect(page.text).toMatch(new RegExp(`<title>Event [a-z.]+ …${id!.slice(-12)} · edge-outbox</title>`));
  });

  it("follows an event from write to receiver: payload, fan-out, deliveries and every attempt, escaped", async () => {
    const [id, later] = await seedEvents(t.pool, 2);
    await t.pool.query(
      `UPDATE events SET fanned_out_at = now(), fanout = $2, attempts = 1, last_error = $3, payload = $4 WHERE id = $1`,
      [
        id,
        JSON.stringify({ "notify.mail": { messageId: "msg_abc" }, "corpus.index": { coalescedInto: later } }),
        `first try failed ${SCRIPT}`,
        JSON.stringify({ title: SCRIPT }),
      ],
    );
    const ep = await endpoint("https://receiver.example/ok");
    await delivery(ep, id!, "delivered", [
      [503, null],
      [200, null],
    ]);

    const page = await browser.get(`/dashboard/events/${id}`);
    expect(page.status).toBe(200);
    expect(page.text).toMatch(
      /<td data-label="subscription">notify\.mail<\/td><td class="mono" data-label="job">QStash msg_abc<\/td>/,
    );
    expect(page.text).toContain(`coalesced into <a href="/dashboard/events/${later}">`);
    expect(page.text).toContain("https://receiver.example/ok");
    expect(page.text).toMatch(/<span class="state state-delivered">delivered<\/span> 2 attempts/);
    expect(page.text).toMatch(
      /<td class="num" data-label="status">503<\/td>.*<td class="num" data-label="status">200<\/td>/,
    );
    expect(page.text).toContain(`body 503 ${ESCAPED}`);
    expect(page.text).toContain(`&quot;title&quot;: &quot;${ESCAPED}&quot;`);
    expect(page.text).toContain(`first try failed ${ESCAPED}`);
    expect(page.text).not.toContain(SCRIPT);
    expect(page.text).not.toContain("Requeue this event");
  });

  it("shows no next attempt for a poisoned row, and offers a requeue", async () => {
    const id = await poison(t.pool, "rejected");
    const page = await browser.get(`/dashboard/events/${id}`);
    expect(page.text).toContain("no further attempts until requeued");
    expect(page.text).not.toContain("next attempt not before");
    expect(page.text).toContain("Requeue this event");

    const pending = (await seedEvents(t.pool, 1))[0]!;
    await t.pool.query(
      `UPDATE events SET attempts = 2, next_attempt_at = now() + interval '1 minute' WHERE id = $1`,
      [pending],
    );
    expect((await browser.get(`/dashboard/events/${pending}`)).text).toContain("next attempt not before");
  });

  it("answers 404 for an unknown or malformed id", async () => {
    const gone = await browser.get("/dashboard/events/00000000-0000-4000-8000-000000000000");
    expect(gone.status).toBe(404);
    // Job failures and deliveries link to events retention has deleted: say it may be that.
    expect(gone.text).toContain("deleted by the cron sweep once fanned out more than RETENTION_DAYS ago");
    expect((await browser.get("/dashboard/events/nope")).status).toBe(404);
  });
});

describe("poisoned, grouped by cause", () => {
  async function setUp() {
    const rejected = [
      await poison(t.pool, `QStash 400: event '9b2c…' rejected: subject "a-1" too long (3001 bytes)`),
      await poison(t.pool, `QStash 400: event 'x' rejected: subject "b-22" too long (4100 bytes)`),
      await poison(
        t.pool,
        `QStash 400: event 'y' rejected: subject "c" too long (9 bytes)`,
        "supplier.activated",
      ),
    ];
    const other = [
      await poison(t.pool, "payload for 4c1f1d2e-5d0a-4a7b-9d43-0e4a1c6a3b21 is not JSON ${SCRIPT}"),
    ];
    other.push(
      await poison(t.pool, "payload for 0e0e1d2e-5d0a-4a7b-9d43-0e4a1c6a3b99 is not JSON ${SCRIPT}"),
    );
    return { rejected, other };
  }

  it("groups rows by error fingerprint with count, first/last seen, types and an example", async () => {
    const { rejected } = await setUp();
    const page = await browser.get("/dashboard/poisoned");
    expect(page.status).toBe(200);
    const groups = [
      ...page.text.matchAll(/<form class="group"[^>]*><h2>([^<]+)<\/h2><div class="meta">([^<]+)/g),
    ];
    // In each group the keyboard meets the boxes before the button that sends them.
    const forms = page.text.match(/<form class="group".*?<\/form>/g)!;
    for (const form of forms) {
      expect(form.lastIndexOf('name="id"')).toBeLessThan(form.indexOf("Requeue selected"));
    }
    // Each group's two shared controls are named for it, so a list of the page's buttons tells them apart.
    forms.forEach((form, i) => {
      const count = /(\d+) events? ·/.exec(form)![1]!;
      const of = `<span class="unseen"> of group ${i + 1} (${count} event${count === "1" ? "" : "s"})</span>`;
      expect(form).toContain(`Requeue selected${of}</button>`);
      expect(form).toContain(`select all shown${of}</label>`);
    });
    expect(groups.map((g) => g[1])).toEqual([
      "QStash &lt;n&gt;: event &lt;value&gt; rejected: subject &lt;value&gt; too long (&lt;n&gt; bytes)",
      "payload for &lt;id&gt; is not JSON ${SCRIPT}".replace(SCRIPT, ESCAPED),
    ]);
    expect(groups[0]![2]).toMatch(
      /^3 events · first .+Z · last .+Z · types supplier\.activated, supplier\.connected$/,
    );
    expect(groups[1]![2]).toMatch(/^2 events/);
    for (const id of rejected) expect(page.text).toContain(`value="${id}"`);
    expect(page.text).not.toContain(SCRIPT);
  });

  it("requeues a selection, then a whole group, and shows the requeued rows", async () => {
    const { rejected, other } = await setUp();
    const picked = await browser.post("/dashboard/poisoned/requeue", { id: [rejected[0]!, other[1]!] });
    expect(picked.status).toBe(303);
    const location = picked.headers.get("location")!;
    expect(location).toMatch(/^\/dashboard\/poisoned\?requeued=2&track=/);
    expect((await stateOf(t.pool, rejected[0]!)).poisoned_at).toBeNull();
    expect((await stateOf(t.pool, other[1]!)).poisoned_at).toBeNull();
    expect((await stateOf(t.pool, rejected[1]!)).poisoned_at).not.toBeNull();

    const after = await browser.get(location);
    expect(after.text).toContain("Requeued 2 events.");
    expect(after.text).toMatch(/<span class="state state-pending">pending<\/span>/);
    // Still pending (no QStash here), so the page is watched until they fan out:
    // by the script in place, or by a reload where there is no script.
    expect(after.text).toMatch(
      /<noscript><meta http-equiv="refresh" content="2; url=[^"]*reloaded=1"\/><\/noscript>/,
    );
    expect(after.text).toMatch(
      /<p class="live" data-watch="\/dashboard\/poisoned\?[^"]*reloaded=1" data-every="2">/,
    );
    // Settled: one poisoned again by what poisoned it before, one fanned out. "All 2
    // shown have left the queue" read as a fix that worked.
    await t.pool.query("UPDATE events SET poisoned_at = now() WHERE id = $1", [rejected[0]!]);
    await t.pool.query("UPDATE events SET fanned_out_at = now(), fanout = '{}' WHERE id = $1", [other[1]!]);
    const settled = await browser.get(location);
    expect(settled.text).toContain(
      "Requeued 2 events. 1 of the 2 shown was poisoned again: what poisoned it is still there (the table says what). 1 fanned out.",
    );
    expect(settled.text).not.toMatch(/http-equiv="refresh"/);
    await t.pool.query("UPDATE events SET poisoned_at = NULL WHERE id = $1", [rejected[0]!]);

    const fingerprint = /name="fingerprint" value="([^"]+)"/
      .exec(after.text)![1]!
      .replace(/&lt;/g, "<")
      .replace(/&gt;/g, ">");
    expect(fingerprint).toMatch(/^QStash <n>: event <value> rejected/);
    const group = await browser.post("/dashboard/poisoned/requeue", { fingerprint });
    expect(group.headers.get("location")).toMatch(/requeued=2&/);
    for (const id of rejected) expect((await stateOf(t.pool, id)).poisoned_at).toBeNull();
    expect((await stateOf(t.pool, other[0]!)).poisoned_at).not.toBeNull();
    expect((await stateOf(t.pool, rejected[1]!)).attempts).toBe(0);
  });

  it("requeues every event poisoned up to the page's time at once, 10,000 a press, whatever its group", async () => {
    await setUp();
    const page = await browser.get("/dashboard/poisoned");
    expect(page.text).toContain("Requeue all 5 poisoned");
    const upTo =
      /<form method="post" action="\/dashboard\/poisoned\/requeue-all"><input type="hidden" name="upTo" value="([^"]+)"/.exec(
        page.text,
      )![1]!;
    expect(upTo).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    // Poisoned after the operator looked: not put back unseen.
    const [late] = await seedEvents(t.pool, 1);
    await poisonEvents(t.pool, [late!], new Date(Date.parse(upTo) + 1_000).toISOString());

    const res = await browser.post("/dashboard/poisoned/requeue-all", { upTo });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/dashboard/poisoned?requeued=5");
    const after = await browser.get("/dashboard/poisoned?requeued=5");
    expect(after.text).toContain("Requeued 5 events.");
    expect(after.text).toContain("1 poisoned event in 1 group");
    const { rows } = await t.pool.query(`SELECT id FROM events WHERE poisoned_at IS NOT NULL`);
    expect(rows.map((r) => r.id)).toEqual([late]);

    // More than a press takes: the rest wait for the next one, and the page says so.
    const many = await seedEvents(t.pool, 10_001);
    await poisonEvents(t.pool, many, "2026-12-05T17:00:00Z");
    const capped = await browser.post("/dashboard/poisoned/requeue-all", { upTo });
    expect(capped.headers.get("location")).toBe("/dashboard/poisoned?requeued=10000&more=1");
    expect((await browser.get("/dashboard/poisoned?requeued=10000&more=1")).text).toContain(
      "More poisoned before that press remain: press Requeue all again.",
    );
    expect((await browser.post("/dashboard/poisoned/requeue-all", { upTo })).headers.get("location")).toBe(
      "/dashboard/poisoned?requeued=1",
    );
    expect((await browser.post("/dashboard/poisoned/requeue-all", { upTo: "yesterday" })).status).toBe(400);
    expect((await browser.post("/dashboard/poisoned/requeue-all", {})).status).toBe(400);
  }, 60_000);

  it("requeues one row from its page and goes back to it", async () => {
    const id = await poison(t.pool, "boom");
    const res = await browser.post("/dashboard/poisoned/requeue", { id, back: "event" });
    expect(res.headers.get("location")).toBe(`/dashboard/events/${id}?requeued=1`);
    expect((await browser.get(res.headers.get("location")!)).text).toContain(
      "Requeued: the relay will fan it out",
    );
    expect((await stateOf(t.pool, id)).poisoned_at).toBeNull();
    const again = await browser.post("/dashboard/poisoned/requeue", { id, back: "event" });
    expect(again.headers.get("location")).toBe(`/dashboard/events/${id}?unchanged=1`);
    expect((await browser.get(again.headers.get("location")!)).text).toContain("no longer poisoned");
    expect((await browser.post("/dashboard/poisoned/requeue", { id: "nope" })).status).toBe(400);
    const nothing = await browser.post("/dashboard/poisoned/requeue", {});
    expect(nothing.headers.get("location")).toBe("/dashboard/poisoned?nothing=1");
    expect((await browser.get("/dashboard/poisoned?nothing=1")).text).toContain(
      "Nothing selected to requeue.",
    );
  });
});

describe("webhook endpoints", () => {
  it("lists endpoints with their health and shows one endpoint's deliveries", async () => {
    const ok = await endpoint("https://receiver.example/ok");
    const off = await endpoint("https://receiver.example/off");
    await t.pool.query(
      `UPDATE webhook_endpoints SET enabled = false, disabled_at = now(), disabled_reason = $2,
              failing_since = now() - interval '5 days' WHERE id = $1`,
      [off, `failing for 5 days ${SCRIPT}`],
    );
    await t.pool.query(`UPDATE webhook_endpoints SET last_success_at = now() WHERE id = $1`, [ok]);
    const [a, b] = await seedEvents(t.pool, 2, { fanned: true });
    await delivery(ok, a!, "delivered", [
      [500, null],
      [200, null],
    ]);
    await delivery(ok, b!, "failed", [
      [null, "timeout"],
      [503, null],
    ]);

    const list = await browser.get("/dashboard/webhooks");
    expect(list.status).toBe(200);
    const row = (url: string) =>
      new RegExp(`<a class="mono" href="/dashboard/webhooks/[^"]+">${url}</a>.*?</tr>`).exec(
        list.text,
      )?.[0] ?? "";
    expect(row("https://receiver.example/ok")).toContain(
      '<span class="state state-delivered">healthy</span>',
    );
    expect(row("https://receiver.example/ok")).toContain("25.0 % of 4 attempts");
    expect(row("https://receiver.example/ok")).toMatch(
      /<td class="num" data-label="pending">0<\/td><td class="num" data-label="gave up">1<\/td>/,
    );
    expect(row("https://receiver.example/off")).toContain('<span class="state state-failed">disabled</span>');
    expect(row("https://receiver.example/off")).toContain(`failing for 5 days ${ESCAPED}`);
    expect(list.text).not.toContain(SCRIPT);
    expect(list.text).not.toContain("sealed");
    // Newest first, in the order GET /admin/webhooks/endpoints pages them.
    const api = await call<{ endpoints: { url: string }[] }>(
      createApp(),
      env,
      "GET",
      "/admin/webhooks/endpoints",
      undefined,
      { headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } },
    );
    const apiOrder = api.body.endpoints.map((e) => e.url);
    expect(apiOrder).toEqual(["https://receiver.example/off", "https://receiver.example/ok"]);
    expect(list.text.indexOf("https://receiver.example/off")).toBeLessThan(
      list.text.indexOf("https://receiver.example/ok"),
    );

    const detail = await browser.get(`/dashboard/webhooks/${ok}`);
    expect(detail.status).toBe(200);
    expect(detail.text).toContain(`href="/dashboard/events/${a}"`);
    expect(detail.text).toContain(`href="/dashboard/events/${b}"`);
    expect(detail.text).toContain(`receiver said ${ESCAPED}`);
    expect(detail.text).not.toContain("sealed");
    expect(detail.text).not.toContain("match no event");
    expect(detail.text).not.toContain("Recover deliveries sends them now");
    // Failing: its health says what sends its retries, hours apart, once it answers.
    await t.pool.query(
      `UPDATE webhook_endpoints SET failing_since = now() - interval '1 hour' WHERE id = $1`,
      [ok],
    );
    expect((await browser.get(`/dashboard/webhooks/${ok}`)).text).toContain(
      '<span class="state state-failed">failing</span> — its deliveries are retried on a schedule, hours apart by the ' +
        "later attempts: once its receiver answers, Recover deliveries sends them now.",
    );
    await t.pool.query(`UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1`, [ok]);
    expect((await browser.get("/dashboard/webhooks/00000000-0000-4000-8000-000000000000")).status).toBe(404);
    // Upper-case globs, taken before 2026-12-07, match no event: the page says so by them.
    await t.pool.query("UPDATE webhook_endpoints SET types = '{Supplier.*,note.*}' WHERE id = $1", [ok]);
    expect((await browser.get(`/dashboard/webhooks/${ok}`)).text).toContain(
      '<td class="mono">Supplier.*, note.*<span class="error"> — &quot;Supplier.*&quot; matches no event (event types are lower case): save the types in lower case</span></td>',
    );
  });
});

describe("webhook endpoint actions", () => {
  const secretsKey = () => importSecretsKey(env.WEBHOOK_SECRETS_KEY!);
  const shownSecret = (text: string) =>
    /<pre id="secret" tabindex="0" autofocus="">([^<]+)<\/pre>/.exec(text)?.[1];

  /** The rotate form's fields as the endpoint page renders them. */
  async function rotateForm(id: string): Promise<{ version: string }> {
    const page = await browser.get(`/dashboard/webhooks/${id}`);
    const form = new RegExp(
      `<form class="inline" method="post" action="/dashboard/webhooks/${id}/rotate-secret"><input type="hidden" name="version" value="([^"]+)"/>`,
    ).exec(page.text);
    expect(form, "the rotate form and its version").not.toBeNull();
    return { version: form![1]! };
  }

  async function secretColumns(id: string) {
    const { rows } = await t.pool.query(
      `SELECT id, secret_box AS "secretBox", previous_secret_box AS "previousSecretBox",
              previous_secret_expires_at AS "previousSecretExpiresAt", updated_at AS "updatedAt"
         FROM webhook_endpoints WHERE id = $1`,
      [id],
    );
    return rows[0] as {
      id: string;
      secretBox: string;
      previousSecretBox: string | null;
      previousSecretExpiresAt: Date | null;
      updatedAt: Date;
    };
  }

  it("disables and enables an endpoint, and refuses a cross-site post", async () => {
    const id = await endpoint("https://receiver.example/toggle");
    const enabled = async () =>
      (await t.pool.query(`SELECT enabled, disabled_reason FROM webhook_endpoints WHERE id = $1`, [id]))
        .rows[0];
    const page = await browser.get(`/dashboard/webhooks/${id}`);
    expect(page.text).toContain('<input type="hidden" name="enabled" value="false"/>');
    // What Disable does to the deliveries already pending, said before it is pressed:
    // they fail, as the deliver job finds the endpoint disabled; they do not wait.
    // And that events meanwhile make no delivery at all: "Recover sends them again"
    // read as covering them too, and an operator disabled an endpoint to pause it.
    expect(page.text).toContain(
      "its pending deliveries fail without a request (once it is enabled again, Recover sends those again), and events recorded while it is disabled make no delivery for it, now or later. Disable to stop its webhooks, not to pause them.",
    );

    const forged = await browser.post(
      `/dashboard/webhooks/${id}/enabled`,
      { enabled: "false" },
      { Origin: "https://evil.example" },
    );
    expect(forged.status).toBe(403);
    expect((await enabled()).enabled).toBe(true);

    const off = await browser.post(`/dashboard/webhooks/${id}/enabled`, { enabled: "false" });
    expect(off.headers.get("location")).toBe(`/dashboard/webhooks/${id}?disabled=1`);
    expect(await enabled()).toEqual({ enabled: false, disabled_reason: "disabled by an operator" });
    const after = await browser.get(off.headers.get("location")!);
    expect(after.text).toContain("Endpoint disabled.");
    expect(after.text).toContain('<span class="state state-failed">disabled</span>');

    const on = await browser.post(`/dashboard/webhooks/${id}/enabled`, { enabled: "true" });
    expect(await enabled()).toEqual({ enabled: true, disabled_reason: null });
    expect((await browser.get(on.headers.get("location")!)).text).toContain(
      "Endpoint enabled: it is sent the events recorded from now on. Events recorded while it was disabled made no delivery for it; Recover deliveries sends again the ones that failed.",
    );
    expect((await browser.post(`/dashboard/webhooks/${id}/enabled`, { enabled: "maybe" })).status).toBe(400);
    const unknown = "00000000-0000-4000-8000-000000000000";
    expect((await browser.post(`/dashboard/webhooks/${unknown}/enabled`, { enabled: "true" })).status).toBe(
      404,
    );
  });

  it("rotates the secret and shows the new one once, and on no other page", async () => {
    const id = await endpoint("https://receiver.example/rotate");
    const form = await rotateForm(id);
    const rotated = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, form);
    expect(rotated.status).toBe(200);
    expect(rotated.headers.get("cache-control")).toBe("no-store");
    const secret = /<pre id="secret" tabindex="0" autofocus="">([^<]+)<\/pre>/.exec(rotated.text)![1]!;
    expect(secret).toMatch(/^whsec_/);
    const { rows } = await t.pool.query(`SELECT secret_box FROM webhook_endpoints WHERE id = $1`, [id]);
    expect(await openSecret(await importSecretsKey(env.WEBHOOK_SECRETS_KEY!), rows[0].secret_box, id)).toBe(
      secret,
    );

    for (const path of [`/dashboard/webhooks/${id}`, "/dashboard/webhooks", "/dashboard"]) {
      expect((await browser.get(path)).text, path).not.toContain(secret);
    }
    const forged = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, await rotateForm(id), {
      Origin: "https://evil.example",
    });
    expect(forged.status).toBe(403);
    const { rows: still } = await t.pool.query(`SELECT secret_box FROM webhook_endpoints WHERE id = $1`, [
      id,
    ]);
    expect(still[0].secret_box).toBe(rows[0].secret_box);
  });

  it("a resubmitted rotate form (a reload of the new secret's page) is refused and rotates nothing", async () => {
    const { id, secret: original } = await insertEndpoint(t.pool, secretsKey(), {
      url: "https://receiver.example/reload",
    });
    const form = await rotateForm(id);
    const first = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, form);
    expect(first.status).toBe(200);
    const copied = shownSecret(first.text)!;
    const afterFirst = await secretColumns(id);
    expect(await signingSecrets(await secretsKey(), afterFirst, new Date())).toEqual([copied, original]);

    const again = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, form);
    expect(again.status).toBe(409);
    expect(again.headers.get("cache-control")).toBe("no-store");
    expect(again.text).toContain("<h1>Secret already rotated</h1>");
    expect(again.text).toMatch(
      /was already rotated \(the endpoint last changed at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\)/,
    );
    expect(again.text).toContain(
      `<a href="/dashboard/webhooks/${id}">Rotate again from the endpoint page</a>`,
    );
    expect(shownSecret(again.text)).toBeUndefined();
    expect(again.text).not.toContain("whsec_");
    // Not a second rotation: the receiver keeps the secret it has, beside the one just copied.
    expect(await secretColumns(id)).toEqual(afterFirst);

    // The endpoint page carries the new version, so a deliberate second rotation still works.
    const fresh = await rotateForm(id);
    expect(fresh.version).not.toBe(form.version);
    const second = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, fresh);
    expect(second.status).toBe(200);
    expect(await signingSecrets(await secretsKey(), await secretColumns(id), new Date())).toEqual([
      shownSecret(second.text),
      copied,
    ]);

    for (const version of [undefined, "not-a-version", form.version.toUpperCase()]) {
      const bad = await browser.post(`/dashboard/webhooks/${id}/rotate-secret`, version ? { version } : {});
      expect(bad.status, version).toBe(400);
      expect(bad.text, version).toContain("version");
    }
    const unknown = "00000000-0000-4000-8000-000000000000";
    expect((await browser.post(`/dashboard/webhooks/${unknown}/rotate-secret`, form)).status).toBe(404);
  });

  it("two submits of one rendered rotate form at once: one rotates, the other is refused", async () => {
    const { id, secret: original } = await insertEndpoint(t.pool, secretsKey(), {
      url: "https://receiver.example/double-click",
    });
    const form = await rotateForm(id);
    // Both UPDATEs queue behind this row lock, so they really meet at the row
    // rather than one finishing before the other starts.
    const holder = await t.pool.connect();
    let submits: Promise<Awaited<ReturnType<typeof browser.post>>[]>;
    try {
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE`, [id]);
      submits = Promise.all([
        browser.post(`/dashboard/webhooks/${id}/rotate-secret`, form),
        browser.post(`/dashboard/webhooks/${id}/rotate-secret`, form),
      ]);
      await waitFor(async () => {
        const { rows } = await t.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE 'update %webhook_endpoints%'`,
        );
        return rows[0].n === 2;
      }, 10_000);
      await holder.query("COMMIT");
    } finally {
      holder.release();
    }
    const answers = await submits;
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    const won = answers.find((a) => a.status === 200)!;
    expect(await signingSecrets(await secretsKey(), await secretColumns(id), new Date())).toEqual([
      shownSecret(won.text),
      original,
    ]);
  });
});

describe("notices", () => {
  it("show only fixed texts: a link cannot put words on a page", async () => {
    const words = encodeURIComponent("Call +1 555 0100 now");
    const id = await poison(t.pool, "boom");
    for (const path of [
      `/dashboard/alerts?notice=${words}`,
      `/dashboard/poisoned?notice=${words}`,
      `/dashboard/events/${id}?notice=${words}`,
      `/dashboard?notice=${words}`,
    ]) {
      const page = await browser.get(path);
      expect(page.status, path).toBe(200);
      expect(page.text, path).not.toContain("555 0100");
    }
    for (const path of [`/dashboard/alerts?resolved=${words}`, `/dashboard/poisoned?nothing=${words}`]) {
      const page = await browser.get(path);
      expect(page.status, path).toBe(400);
      expect(page.text, path).not.toContain("555 0100");
    }
  });
});

describe("alerts", () => {
  it("tells each alert's event apart by the end of its id, the whole id on hover", async () => {
    // Two events of one burst: UUIDv7s whose first (time) digits are the same.
    const [burstA, burstB] = await seedEvents(t.pool, 2);
    for (const id of [burstA!, burstB!])
      await t.pool.query(
        `INSERT INTO outbox_alerts (kind, event_id, message) VALUES ('webhook.delivery_failed', $1, 'burst')`,
        [id],
      );
    const page = await browser.get("/dashboard/alerts");
    for (const id of [burstA!, burstB!])
      expect(page.text).toContain(`title="${id}">event …${id.slice(-12)}</a>`);
    // On one line: a 13-character id broken anywhere stacked "…" / "3d447b167" / "f69" in its column.
    for (const id of [burstA!, burstB!])
      expect(page.text).toMatch(
        new RegExp(
          `<td class="mono nowrap" data-label="about">\\s*<a href="/dashboard/events/${id}" title="${id}">`,
        ),
      );
    expect((await browser.get("/dashboard/assets/dashboard.css")).text).toContain(
      ".nowrap{white-space:nowrap}",
    );
    await t.pool.query(`UPDATE outbox_alerts SET resolved_at = now() WHERE message = 'burst'`);
  });

  it("links an endpoint's alert to the endpoint's page, and shows a resolved alert as history", async () => {
    const endpointId = crypto.randomUUID();
    const [eventId] = await seedEvents(t.pool, 1);
    const { rows } = await t.pool.query(
      `INSERT INTO outbox_alerts (kind, event_id, message, details, resolved_at)
       VALUES ('webhook.delivery_failed', $1, 'open failures', jsonb_build_object('endpointId', $2::text), NULL),
              ('webhook.delivery_failed', NULL, 'old failures', jsonb_build_object('endpointId', $2::text), now())
       RETURNING id`,
      [eventId, endpointId],
    );
    const page = (await browser.get("/dashboard/alerts?show=all")).text;
    expect(page).toContain(
      `<a href="/dashboard/webhooks/${endpointId}" title="${endpointId}">endpoint …${endpointId.slice(-12)}</a>`,
    );
    expect(page).toContain(`<a href="/dashboard/events/${eventId}" title="${eventId}">event …`);
    expect(page).toMatch(/<td class="error" data-label="message">open failures<\/td>/);
    expect(page).toMatch(/<td class="muted" data-label="message">old failures<\/td>/);
    expect(page).not.toContain("merged into");
    // One an upgrade merged (migrations 0016, 0023) read as resolved by someone.
    await t.pool.query(
      `UPDATE outbox_alerts SET details = details || jsonb_build_object('mergedInto', $2::bigint) WHERE id = $1`,
      [rows[1].id, rows[0].id],
    );
    expect((await browser.get("/dashboard/alerts?show=all")).text).toMatch(
      new RegExp(
        `<td data-label="action">resolved [^<]*, merged into alert ${rows[0].id} by an upgrade</td>`,
      ),
    );
    // And on the page of the event it names.
    await t.pool.query("UPDATE outbox_alerts SET event_id = $2 WHERE id = $1", [rows[1].id, eventId]);
    expect((await browser.get(`/dashboard/events/${eventId}`)).text).toMatch(
      new RegExp(`<td data-label="resolved">[^<]+Z, merged into alert ${rows[0].id} by an upgrade</td>`),
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE id = ANY($1)", [
      rows.map((r) => r.id),
    ]);
  });

  it("names a subscription's own alert, and after a resolve says what job failures are still owed", async () => {
    const { rows } = await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message)
       VALUES ('subscription.failing', 'notify.mail', 'subscription notify.mail is failing') RETURNING id`,
    );
    const page = (await browser.get("/dashboard/alerts")).text;
    // Its failures are where its message sends the reader.
    expect(page).toMatch(
      /<td class="mono nowrap" data-label="about">subscription notify\.mail<br\/?><a href="\/dashboard\/job-failures\?subscription=notify\.mail">its failed jobs<\/a><\/td>/,
    );

    const owed = await insertJobFailure(t.pool);
    const overview = (await browser.get("/dashboard")).text;
    expect(overview).toMatch(
      /Jobs not retried<\/div><div class="value"><a href="\/dashboard\/job-failures"><span class="unseen">Jobs not retried <\/span>1<\/a>/,
    );
    await browser.post("/dashboard/alerts/resolve", { id: String(rows[0].id) });
    expect((await browser.get("/dashboard/alerts?resolved=1")).text).toContain(
      "Resolved 1 alert. 1 job failure is still not retried: retry them on the job failures page.",
    );
    await t.pool.query(
      "UPDATE job_failures SET retried_at = now(), retry_message_id = 'msg_x' WHERE id = $1",
      [owed],
    );
    expect((await browser.get("/dashboard/alerts?resolved=1")).text).toContain("Resolved 1 alert.<");
  });

  it("sends a subscription's failed-jobs alert to the failures it counts", async () => {
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, event_id, message, details)
       VALUES ('job.failed', 'corpus.index', gen_random_uuid(), '3 jobs for corpus.index ran out of retries', '{"count": 3}')`,
    );
    const page = await browser.get("/dashboard/alerts");
    expect(page.text).toMatch(
      /<td class="mono nowrap" data-label="about">subscription corpus\.index<br\/?><a href="\/dashboard\/job-failures\?subscription=corpus\.index">its failed jobs<\/a><\/td>/,
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
  });

  it("sends a type's poisoned-events alert to the events it counts, and says a resolve requeues nothing", async () => {
    const ids = await seedEvents(t.pool, 3, { type: "supplier.connected" });
    await poisonEvents(t.pool, ids, "2026-12-07T10:00:00Z");
    const page = (await browser.get("/dashboard/alerts")).text;
    expect(page).toContain(
      "3 events of type supplier.connected were poisoned; the latest: event " +
        ids[2] +
        " poisoned after 5 failures",
    );
    expect(page).toMatch(
      new RegExp(
        `<td class="mono nowrap" data-label="about"><a href="/dashboard/events/${ids[2]}" title="${ids[2]}">event …[0-9a-f]+</a><br/?><a href="/dashboard/events\\?state=poisoned&amp;type=supplier\\.connected">poisoned supplier\\.connected events</a></td>`,
      ),
    );
    expect(page).toContain(
      'resolving requeues nothing: <a href="/dashboard/poisoned">requeue them on the Poisoned page</a>',
    );
    expect(page).toContain(
      "Marks 1 open event.poisoned alert resolved. Nothing is sent or requeued. The events it counts stay poisoned: Requeue on the Poisoned page sends them again.",
    );
    // An earlier event's page shows the alert that counts it under the latest.
    expect((await browser.get(`/dashboard/events/${ids[0]}`)).text).toContain(
      "counts this event&#39;s poisoning; it names the latest",
    );
    await t.pool.query("UPDATE events SET poisoned_at = NULL WHERE id = ANY($1)", [ids]);
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
  });

  it("says, before resolving an alert the sweep checks, that a resolve lasts only till the next sweep", async () => {
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message, details)
       VALUES ('subscription.failing', 'notify.mail', 'subscription notify.mail is failing', '{}')`,
    );
    const page = (await browser.get("/dashboard/alerts")).text;
    expect(page).toContain(
      "Marks 1 open subscription.failing alert resolved. Nothing is sent or requeued. While what it reports lasts, the next sweep raises it again.",
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
  });

  it("says after a single row's Resolve what it did not stop, as the resolve by kind's confirm does", async () => {
    const { rows } = await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message, details)
       VALUES ('subscription.failing', 'notify.mail', 'subscription notify.mail is failing', '{}'),
              ('webhook.delivery_failed', NULL, '3 deliveries failed', '{}')
       RETURNING id, kind`,
    );
    const page = (await browser.get("/dashboard/alerts")).text;
    for (const { id, kind } of rows as { id: number; kind: string }[]) {
      // The row's own form, as a browser would send it.
      const form = new RegExp(
        `name="id" value="${id}"\\s*/?>\\s*<input type="hidden" name="kind" value="([^"]+)"`,
      ).exec(page);
      expect(form?.[1]).toBe(kind);
      const res = await browser.post("/dashboard/alerts/resolve", { id: String(id), kind: form![1]! });
      expect(res.headers.get("location")).toBe(`/dashboard/alerts?resolved=1&kind=${kind}`);
    }
    expect((await browser.get("/dashboard/alerts?resolved=1&kind=subscription.failing")).text).toContain(
      "Resolved 1 alert. While what it reports lasts, the next sweep raises it again.",
    );
    expect((await browser.get("/dashboard/alerts?resolved=1&kind=webhook.delivery_failed")).text).toContain(
      "Resolved 1 alert. The failed deliveries it counts stay failed: Recover on the endpoint&#39;s page sends them again.",
    );
    // A kind that is none puts no words on the page.
    expect((await browser.get("/dashboard/alerts?resolved=1&kind=%3Cb%3Ehi")).text).toMatch(
      /id="notice" tabindex="-1"( autofocus="")?>Resolved 1 alert\.<\/p>/,
    );
  });

  it("lists open alerts, resolves one, then all of a kind", async () => {
    const insert = async (kind: string, message: string) =>
      (
        await t.pool.query(`INSERT INTO outbox_alerts (kind, message) VALUES ($1, $2) RETURNING id`, [
          kind,
          message,
        ])
      ).rows[0].id as number;
    const a = await insert("job.failed", `job one ${SCRIPT}`);
    await insert("job.failed", "job two");
    await insert("job.failed", "job three");
    const poisonedAlert = await insert("event.poisoned", "row");
    const page = await browser.get("/dashboard/alerts");
    expect(page.status).toBe(200);
    expect(page.text).toContain(`job one ${ESCAPED}`);
    expect(page.text).toContain("Resolve all job.failed (3)");
    expect(page.text).toContain("Resolve all event.poisoned (1)");
    // Beside job.failed's, that a failed job is answered by a retry; poisoned events' has none.
    expect(
      page.text.match(
        /resolving sends nothing again: <a href="\/dashboard\/job-failures">retry them on the job failures page<\/a>/g,
      ),
    ).toHaveLength(1);

    const one = await browser.post("/dashboard/alerts/resolve", { id: String(a) });
    expect(one.status).toBe(303);
    expect(one.headers.get("location")).toBe("/dashboard/alerts?resolved=1");
    expect((await browser.get("/dashboard/alerts?resolved=1")).text).toContain("Resolved 1 alert.");
    // "Resolve all" takes what the page showed: one raised since is left open.
    const shown =
      /name="kind" value="job\.failed"\s*\/?>\s*<input type="hidden" name="upTo" value="(\d+)"/.exec(
        (await browser.get("/dashboard/alerts")).text,
      )?.[1];
    expect(shown).toBeDefined();
    const raisedSince = await insert("job.failed", "job four");
    const kind = await browser.post("/dashboard/alerts/resolve", { kind: "job.failed", upTo: shown! });
    expect(kind.headers.get("location")).toBe("/dashboard/alerts?resolved=2");
    const { rows } = await t.pool.query(`SELECT id FROM outbox_alerts WHERE resolved_at IS NULL ORDER BY id`);
    expect(rows.map((r) => String(r.id))).toEqual([String(poisonedAlert), String(raisedSince)]);
    await t.pool.query(`UPDATE outbox_alerts SET resolved_at = now() WHERE id = $1`, [raisedSince]);

    const open = await browser.get("/dashboard/alerts");
    expect(open.text).not.toContain("job one");
    const all = await browser.get("/dashboard/alerts?show=all");
    expect(all.text).toContain(`job one ${ESCAPED}`);
    expect(all.text).toMatch(/resolved \d{4}-/);
  });

  it("pages back through more alerts than a page holds, open or all, each alert once", async () => {
    // It showed the newest 200 and nothing of the rest.
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message, resolved_at)
       SELECT 'job.failed', 'paged ' || n, CASE WHEN n % 2 = 0 THEN now() END FROM generate_series(1, 260) n`,
    );
    const messages = (html: string) => [...html.matchAll(/>paged (\d+)</g)].map((m) => Number(m[1]));
    for (const [start, expected] of [
      ["/dashboard/alerts", Array.from({ length: 130 }, (_, i) => 259 - 2 * i)],
      ["/dashboard/alerts?show=all", Array.from({ length: 260 }, (_, i) => 260 - i)],
    ] as const) {
      const seen: number[] = [];
      let path: string | undefined = start;
      const pages: string[] = [];
      while (path !== undefined) {
        const page = await browser.get(path);
        expect(page.status, path).toBe(200);
        seen.push(...messages(page.text));
        pages.push(path);
        path = /<a rel="next" href="([^"]+)">/.exec(page.text)?.[1]?.replace(/&amp;/g, "&");
        if (pages.length > 5) throw new Error(`${start}: the older links never ended`);
      }
      expect(seen, start).toEqual(expected);
      // Other tests' alerts share the pages: at least as many as these alone fill.
      expect(pages.length, start).toBeGreaterThanOrEqual(Math.ceil(expected.length / ALERTS_PAGE));
      // The kind of list shown is kept on the way back, and an older page links to the newest.
      if (start.includes("show=all")) expect(pages.slice(1).every((p) => p.includes("show=all&"))).toBe(true);
      expect((await browser.get(pages[1]!)).text).toContain("« newest");
    }
    await t.pool.query(`UPDATE outbox_alerts SET resolved_at = now() WHERE message LIKE 'paged %'`);
  });
});
