import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { dashboardClient } from "../support/dashboard.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import {
  insertJobFailure,
  jobFailureRow,
  jobRanOutOfRetries,
  relayJobBody,
} from "../support/job-failures.ts";
import { bindings } from "../support/worker.ts";

// The overview's Retry button for jobs that exhausted their retries, through the app
// as the Worker runs it, to the QStash dev server with delivery paused.
const t = useTestDatabase();
let proxy: WsProxy;
let qstash: QStashDev;
let env: Bindings;
let browser: ReturnType<typeof dashboardClient>;

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  qstash = await startQStashDev({ log: () => undefined });
  env = bindings({
    DATABASE_URL: t.url,
    NEON_WS_PROXY: proxy.address,
    QSTASH_URL: qstash.url,
    QSTASH_TOKEN: qstash.token,
  });
  browser = dashboardClient(() => env);
  expect((await browser.login()).status).toBe(303);
});
afterAll(async () => {
  await Promise.all([proxy?.close(), qstash?.close()]);
});
beforeEach(async () => {
  await t.pool.query("TRUNCATE job_failures");
  qstash.reset();
  qstash.pauseDelivery();
});

const jobsInQStash = () => qstash.messages().filter((m) => m.kind !== "failure-callback");
const retryForm = (id: number) =>
  `<form class="inline" method="post" action="/dashboard/job-failures/${id}/retry"><button class="btn secondary small" type="submit">Retry<span class="unseen"> job failure ${id}</span></button></form>`;

describe("retrying a job failure from the overview", () => {
  it("offers Retry for a job of ours, retries it once, then shows the retry instead", async () => {
    const ours = await insertJobFailure(t.pool, { messageId: "msg_ours" });
    const foreign = await insertJobFailure(t.pool, {
      messageId: "msg_foreign",
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });
    const before = await browser.get("/dashboard");
    expect(before.text).toContain(retryForm(ours));
    expect(before.text).not.toContain(`/dashboard/job-failures/${foreign}/retry`);
    expect(before.text).toContain("not retryable");

    const posted = await browser.post(`/dashboard/job-failures/${ours}/retry`, {});

    expect(posted.status).toBe(303);
    expect(posted.headers.get("location")).toBe(`/dashboard?retried=${ours}`);
    const [job] = jobsInQStash();
    expect(jobsInQStash()).toHaveLength(1);
    expect(job).toMatchObject({ url: `${env.PUBLIC_URL}/jobs/notify.mail` });
    const row = await jobFailureRow(t.pool, ours);
    expect(row.retry_message_id).toBe(job!.messageId);

    const after = await browser.get(posted.headers.get("location")!);
    expect(after.status).toBe(200);
    expect(after.text).toContain(`Job failure ${ours} retried: QStash took a new job, ${job!.messageId}.`);
    const shownAt = `${row.retried_at!.toISOString().slice(0, 19).replace("T", " ")}Z`;
    // Its times and message id marked up to wrap whole, never "2026-" / "12-05" (dashboard.test.ts looks).
    expect(after.text).toContain(
      `retried <span class="nowrap">${shownAt}</span> as <span class="mono">${job!.messageId}</span>; not delivered yet<`,
    );
    // Its route took the job (test/worker/job-failure-retry.test.ts): the page says so.
    await t.pool.query("UPDATE job_failures SET retry_delivered_at = '2026-12-05T10:11:12Z' WHERE id = $1", [
      ours,
    ]);
    expect((await browser.get("/dashboard")).text).toContain(
      `retried <span class="nowrap">${shownAt}</span> as <span class="mono">${job!.messageId}</span>; delivered <span class="nowrap">2026-12-05 10:11:12Z</span><`,
    );
    expect(after.text).not.toContain(retryForm(ours));

    // The form sent again (a reload offering to resubmit, a second tab): no second
    // retry, nothing published, and back to the page saying how it was retried rather
    // than a bare 409 page (a walkthrough's stale tab).
    const again = await browser.post(`/dashboard/job-failures/${ours}/retry`, {
      back: "/dashboard/job-failures",
    });
    expect(again.status).toBe(303);
    expect(again.headers.get("location")).toBe(`/dashboard/job-failures?retried=${ours}`);
    expect((await browser.get(again.headers.get("location")!)).text).toContain(
      `Job failure ${ours} retried: QStash took a new job, ${job!.messageId}.`,
    );
    expect(jobsInQStash()).toHaveLength(1);
    // An unknown failure is still refused (the API refuses a second retry: 409).
    expect((await browser.post("/dashboard/job-failures/424242/retry", {})).status).toBe(404);
  });

  it("offers Retry again for a retry whose request was cut off before its publish", async () => {
    const id = await insertJobFailure(t.pool);
    await t.pool.query("UPDATE job_failures SET retried_at = now() - interval '10 seconds' WHERE id = $1", [
      id,
    ]);
    // Maybe still publishing: shown as such, no button.
    const soon = await browser.get("/dashboard");
    expect(soon.text).toContain("(publish not recorded)");
    expect(soon.text).not.toContain(`/dashboard/job-failures/${id}/retry`);
    // Long past any publish's time: abandoned, and offered again.
    await t.pool.query("UPDATE job_failures SET retried_at = now() - interval '2 minutes' WHERE id = $1", [
      id,
    ]);
    const later = await browser.get("/dashboard");
    expect(later.text).toContain("Retry (the last one did not finish)");
    const posted = await browser.post(`/dashboard/job-failures/${id}/retry`, {});
    expect(posted.status).toBe(303);
    expect(jobsInQStash()).toHaveLength(1);
    expect((await jobFailureRow(t.pool, id)).retry_message_id).toBe(jobsInQStash()[0]!.messageId);
  });

  it("shows each failure's last answer, why one cannot be retried, and a retry that failed again", async () => {
    const first = await insertJobFailure(t.pool);
    const foreign = await insertJobFailure(t.pool, {
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });
    expect((await browser.post(`/dashboard/job-failures/${first}/retry`, {})).status).toBe(303);
    const { retry_message_id: retryMessageId } = await jobFailureRow(t.pool, first);
    // The retried job failed for good too, with no answer: recorded under its new id.
    const { rows } = await t.pool.query(
      `INSERT INTO job_failures (message_id, subscription, status, body, response_body)
       VALUES ($1, 'notify.mail', NULL, '{}', NULL) RETURNING id`,
      [retryMessageId],
    );
    const again = Number(rows[0].id);

    const page = (await browser.get("/dashboard")).text;

    expect(page).toContain("500: mail API down");
    expect(page).toContain(`#${again} (retry of #${first})`);
    expect(page).toContain(`as <span class="mono">${retryMessageId}</span>; failed again: #${again}<`);
    expect(page).toContain("no answer");
    expect(page).toContain(
      `not retryable: &quot;https://elsewhere.example/hook&quot; is not one of this app`,
    );
    expect(page).not.toContain(`/dashboard/job-failures/${foreign}/retry"`);
  });

  it("a notice comes from the row, never from the link", async () => {
    const id = await insertJobFailure(t.pool);
    const page = await browser.get(`/dashboard?retried=${id}`);
    expect(page.status).toBe(200);
    expect(page.text).not.toContain('class="notice"');
  });

  it("refuses a cross-site post, and one without a session, and changes nothing", async () => {
    const id = await insertJobFailure(t.pool);
    for (const headers of [{ Origin: "https://evil.example" }, { Origin: "null" }]) {
      const forged = await browser.post(`/dashboard/job-failures/${id}/retry`, {}, headers);
      expect(forged.status).toBe(403);
      expect(forged.text).toContain("cross-site request refused");
    }
    const anonymous = await dashboardClient(() => env).post(`/dashboard/job-failures/${id}/retry`, {});
    expect(anonymous.status).toBe(401);
    expect(jobsInQStash()).toHaveLength(0);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("QStash refusing shows a 503 page and leaves the Retry button", async () => {
    const id = await insertJobFailure(t.pool);
    qstash.failNextPublishes(1, 500);

    const refused = await browser.post(`/dashboard/job-failures/${id}/retry`, {});

    expect(refused.status).toBe(503);
    expect(refused.text).toContain("the failure is left un-retried: try again");
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    expect((await browser.get("/dashboard")).text).toContain(retryForm(id));
  });

  it("Retry all retries every failure not yet retried up to the newest shown, once", async () => {
    const ids = [
      await insertJobFailure(t.pool),
      await insertJobFailure(t.pool),
      await insertJobFailure(t.pool),
    ];
    await insertJobFailure(t.pool, {
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });
    const newest = await insertJobFailure(t.pool);
    expect((await browser.post(`/dashboard/job-failures/${ids[0]}/retry`, {})).status).toBe(303);
    const page = await browser.get("/dashboard");
    // Three open jobs of ours (ids[1], ids[2], newest): the foreign one and the retried one are not counted.
    expect(page.text).toContain(`<input type="hidden" name="upTo" value="${newest}"/>`);
    expect(page.text).toContain("Retry all 3 not yet retried");

    const posted = await browser.post("/dashboard/job-failures/retry", { upTo: String(newest) });

    expect(posted.status).toBe(303);
    expect(posted.headers.get("location")).toBe("/dashboard?retriedAll=3");
    expect(jobsInQStash()).toHaveLength(4);
    for (const id of [...ids, newest])
      expect((await jobFailureRow(t.pool, id)).retry_message_id).toMatch(/^msg_/);
    const after = await browser.get("/dashboard?retriedAll=3");
    expect(after.text).toContain("Retried 3 job failures: each is a new job in QStash.");
    expect(after.text).not.toContain("Retry all");
    // Sent again (a reload): nothing left to retry, nothing published.
    expect(
      (await browser.post("/dashboard/job-failures/retry", { upTo: String(newest) })).headers.get("location"),
    ).toBe("/dashboard?retriedAll=0");
    expect(jobsInQStash()).toHaveLength(4);
    // Said as what happened, not as a retry of none.
    expect((await browser.get("/dashboard?retriedAll=0")).text).toContain(
      "No job failure was left to retry: another retry (a second press, another tab, the CLI) had taken them.",
    );
  });

  it("Retry all leaves a failure recorded after the page was shown", async () => {
    const shown = await insertJobFailure(t.pool);
    const later = await insertJobFailure(t.pool);
    await browser.post("/dashboard/job-failures/retry", { upTo: String(shown) });
    expect((await jobFailureRow(t.pool, shown)).retry_message_id).toMatch(/^msg_/);
    expect(await jobFailureRow(t.pool, later)).toEqual({ retried_at: null, retry_message_id: null });
    expect((await browser.post("/dashboard/job-failures/retry", { upTo: "abc" })).status).toBe(400);
  });

  it("an unknown failure is a 404 page", async () => {
    const res = await browser.post("/dashboard/job-failures/999999/retry", {});
    expect(res.status).toBe(404);
    expect(res.text).toContain("job failure 999999 not found");
  });
});

describe("the job failures page", () => {
  const shownIds = (text: string) =>
    [...text.matchAll(/<tr><td data-label="#">#(\d+)/g)].map((m) => Number(m[1]));
  const olderLink = (text: string) => /<a rel="next" href="([^"]+)"/.exec(text)?.[1]?.replace(/&amp;/g, "&");
  async function insertMany(n: number): Promise<number[]> {
    const { rows } = await t.pool.query(
      `INSERT INTO job_failures (message_id, subscription, status, body)
       SELECT 'msg_many_' || g || '_' || gen_random_uuid(), 'notify.mail', 500, '{}' FROM generate_series(1, $1) g
       RETURNING id`,
      [n],
    );
    return rows.map((r) => Number(r.id)).sort((a, b) => b - a);
  }

  it("lists failures newest first, 50 a page, with an older link only while there are more", async () => {
    const all = await insertMany(100);

    const first = await browser.get("/dashboard/job-failures");
    expect(first.status).toBe(200);
    expect(shownIds(first.text)).toEqual(all.slice(0, 50));
    expect(first.text).not.toContain("« newest");
    const next = olderLink(first.text);
    expect(next).toBe(`/dashboard/job-failures?before=${all[49]}`);

    // Recorded meanwhile: on the first page, not shifting the next one.
    await insertMany(5);
    const second = await browser.get(next!);
    expect(second.status).toBe(200);
    expect(shownIds(second.text)).toEqual(all.slice(50));
    // Exactly the last 50: no older page to link to.
    expect(olderLink(second.text)).toBeUndefined();
    expect(second.text).toContain('<a href="/dashboard/job-failures">« newest</a>');

    const past = await browser.get(`/dashboard/job-failures?before=${all[99]}`);
    expect(shownIds(past.text)).toEqual([]);
    expect(past.text).toContain("No older job failures.");
  });

  it("shows the overview's table: last answer, retry of, event link and the Retry button", async () => {
    const id = await insertJobFailure(t.pool);
    const page = (await browser.get("/dashboard/job-failures")).text;
    expect(page).toContain("<th>QStash message</th><th>retry</th>");
    expect(page).toContain("500: mail API down");
    expect(page).toContain('<a href="/dashboard/events/');
    expect(page).toContain(
      `<form class="inline" method="post" action="/dashboard/job-failures/${id}/retry"><input type="hidden" name="back" value="/dashboard/job-failures"/><button class="btn secondary small" type="submit">Retry<span class="unseen"> job failure ${id}</span></button></form>`,
    );
  });

  it("answers a bad before with a 400 page that names it", async () => {
    for (const before of ["abc", "0", "-3", "1.5", "1e400", "99999999999999999999"]) {
      const bad = await browser.get(`/dashboard/job-failures?before=${before}`);
      expect(bad.status, before).toBe(400);
      expect(bad.headers.get("content-type")).toMatch(/text\/html/);
      expect(bad.text, before).toContain("before");
    }
  });

  it("is in the nav after Alerts, and the overview links to it once there are failures", async () => {
    const none = (await browser.get("/dashboard")).text;
    expect(none).toContain(
      '<a href="/dashboard/alerts">Alerts</a><a href="/dashboard/job-failures">Job failures</a>',
    );
    expect(none).not.toContain("All job failures");
    await insertJobFailure(t.pool);
    expect((await browser.get("/dashboard")).text).toContain(
      '<a href="/dashboard/job-failures">All job failures →</a>',
    );
    const page = (await browser.get("/dashboard/job-failures")).text;
    expect(page).toContain('<a href="/dashboard/job-failures" aria-current="page">Job failures</a>');
  });

  it("a Retry from the page goes back to that page and says so there", async () => {
    const id = await insertJobFailure(t.pool);
    const onPage = await browser.post(`/dashboard/job-failures/${id}/retry`, {
      back: "/dashboard/job-failures",
    });
    expect(onPage.status).toBe(303);
    expect(onPage.headers.get("location")).toBe(`/dashboard/job-failures?retried=${id}`);
    const after = await browser.get(onPage.headers.get("location")!);
    expect(after.text).toContain(`Job failure ${id} retried: QStash took a new job,`);

    // Never anywhere but this page: elsewhere, or this page with anything else on it, goes to the overview.
    for (const elsewhere of [
      "https://evil.example/dashboard/job-failures",
      "//evil.example/dashboard/job-failures",
      "/dashboard/job-failures/../../x",
      "/dashboard/job-failures?before=1&next=https://evil.example",
      "/dashboard/alerts",
      "",
    ]) {
      const other = await insertJobFailure(t.pool);
      const res = await browser.post(`/dashboard/job-failures/${other}/retry`, { back: elsewhere });
      expect(res.headers.get("location"), elsewhere).toBe(`/dashboard?retried=${other}`);
    }
    const paged = await insertJobFailure(t.pool);
    const res = await browser.post(`/dashboard/job-failures/${paged}/retry`, {
      back: "/dashboard/job-failures?before=5",
    });
    expect(res.headers.get("location")).toBe(`/dashboard/job-failures?before=5&retried=${paged}`);
  });

  it("an event's page lists its failed jobs, and a Retry there comes back to it", async () => {
    const [eventId] = await seedEvents(t.pool, 1, { fanned: true });
    const [otherEvent] = await seedEvents(t.pool, 1, { fanned: true });
    const mail = await insertJobFailure(t.pool, { body: relayJobBody("notify.mail", { id: eventId }) });
    const index = await insertJobFailure(t.pool, {
      subscription: "corpus.index",
      body: relayJobBody("corpus.index", { id: eventId }),
    });
    const elsewhere = await insertJobFailure(t.pool, {
      body: relayJobBody("notify.mail", { id: otherEvent }),
    });
    const here = `/dashboard/events/${eventId}`;

    const page = (await browser.get(here)).text;
    expect(page).toContain("<h2>Failed jobs</h2>");
    // No event column: each of its links would be this page.
    expect(page).not.toContain(`<a href="${here}"`);
    for (const id of [mail, index]) {
      expect(page).toContain(
        `<form class="inline" method="post" action="/dashboard/job-failures/${id}/retry"><input type="hidden" name="back" value="${here}"/>`,
      );
    }
    expect(page).not.toContain(`/dashboard/job-failures/${elsewhere}/retry`);

    const posted = await browser.post(`/dashboard/job-failures/${mail}/retry`, { back: here });
    expect(posted.headers.get("location")).toBe(`${here}?retried=${mail}`);
    const after = (await browser.get(posted.headers.get("location")!)).text;
    expect(after).toContain(`Job failure ${mail} retried: QStash took a new job,`);
    expect(after).not.toContain(`/dashboard/job-failures/${mail}/retry`);
    // The other event's page lists only its own.
    const other = (await browser.get(`/dashboard/events/${otherEvent}`)).text;
    expect(other).toContain(`/dashboard/job-failures/${elsewhere}/retry`);
    expect(other).not.toContain(`/dashboard/job-failures/${index}/retry`);
    // An event's page with anything after it is not a page to go back to.
    const odd = await insertJobFailure(t.pool);
    const res = await browser.post(`/dashboard/job-failures/${odd}/retry`, { back: `${here}/../../x` });
    expect(res.headers.get("location")).toBe(`/dashboard?retried=${odd}`);
  });

  it("an earlier event's page shows the open alert that counts its failed job under a later event", async () => {
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const [earlier, later] = await seedEvents(t.pool, 2, { fanned: true });
    for (const id of [earlier, later]) await jobRanOutOfRetries(t, "notify.mail", id!);
    const note = "(counts this event&#39;s failed job; it names the latest)";
    const first = (await browser.get(`/dashboard/events/${earlier}`)).text;
    expect(first).not.toContain('<p class="muted">None.</p>');
    expect(first).toContain("2 jobs for notify.mail ran out of retries");
    expect(first).toContain(note);
    // The event it names shows it once, as its own.
    const last = (await browser.get(`/dashboard/events/${later}`)).text;
    expect(last.match(/2 jobs for notify\.mail ran out of retries/g)).toHaveLength(1);
    expect(last).not.toContain(note);
  });

  it("offers Retry all on its newest page, and comes back to it", async () => {
    await t.pool.query("UPDATE job_failures SET retried_at = now(), retry_message_id = 'msg_done'");
    const ids = [await insertJobFailure(t.pool), await insertJobFailure(t.pool)];
    const page = await browser.get("/dashboard/job-failures");
    expect(page.text).toContain("Retry all 2 not yet retried");
    expect(page.text).toContain(`<input type="hidden" name="upTo" value="${ids[1]}"/>`);
    expect(page.text).toContain(`<input type="hidden" name="back" value="/dashboard/job-failures"/>`);
    // Older pages have none: "up to the newest shown" is the newest page's.
    expect((await browser.get(`/dashboard/job-failures?before=${ids[1]}`)).text).not.toContain("Retry all");

    const posted = await browser.post("/dashboard/job-failures/retry", {
      upTo: String(ids[1]),
      back: "/dashboard/job-failures",
    });
    expect(posted.headers.get("location")).toBe("/dashboard/job-failures?retriedAll=2");
    const after = await browser.get("/dashboard/job-failures?retriedAll=2");
    expect(after.text).toContain("Retried 2 job failures: each is a new job in QStash.");
    expect(after.text).not.toContain("Retry all");
    for (const id of ids) expect((await jobFailureRow(t.pool, id)).retry_message_id).toMatch(/^msg_/);
    // Anywhere else goes to the overview.
    const elsewhere = await browser.post("/dashboard/job-failures/retry", {
      upTo: String(ids[1]),
      back: "https://evil.example/dashboard/job-failures",
    });
    expect(elsewhere.headers.get("location")).toBe("/dashboard?retriedAll=0");
  });

  it("lists one subscription's failures, from its alert, and retries only those", async () => {
    await t.pool.query("UPDATE job_failures SET retried_at = now(), retry_message_id = 'msg_done'");
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const [mailEvent, indexEvent] = await seedEvents(t.pool, 2, { fanned: true });
    const failed = (subscription: string, eventId: string) => jobRanOutOfRetries(t, subscription, eventId);
    const mail = [await failed("notify.mail", mailEvent!), await failed("notify.mail", mailEvent!)];
    const index = await failed("corpus.index", indexEvent!);

    // The mail alert's "its failed jobs" leads to the mail failures alone.
    const alerts = (await browser.get("/dashboard/alerts")).text;
    expect(alerts).toContain(
      '<a href="/dashboard/job-failures?subscription=notify.mail">its failed jobs</a>',
    );
    const here = "/dashboard/job-failures?subscription=notify.mail";
    const page = (await browser.get(here)).text;
    expect(page).toContain("<h1>Job failures of notify.mail</h1>");
    expect(page).toContain('<strong aria-current="page">notify.mail</strong>');
    expect(page).toContain('<a href="/dashboard/job-failures">every subscription</a>');
    for (const id of mail) expect(page).toContain(`/dashboard/job-failures/${id}/retry`);
    expect(page).not.toContain(`/dashboard/job-failures/${index}/retry`);
    // The title names the subscription: no column repeats it on every row.
    expect(page).not.toContain("<th>subscription</th>");
    expect((await browser.get("/dashboard/job-failures")).text).toContain("<th>subscription</th>");
    expect(page).toContain("Retry all 2 of notify.mail not yet retried");
    expect(page).toContain('<input type="hidden" name="subscription" value="notify.mail"/>');
    // A Retry from this page comes back to it.
    expect(page).toContain(`<input type="hidden" name="back" value="${here}"/>`);

    const posted = await browser.post("/dashboard/job-failures/retry", {
      upTo: String(index),
      subscription: "notify.mail",
      back: here,
    });
    expect(posted.headers.get("location")).toBe(`${here}&retriedAll=2`);
    for (const id of mail) expect((await jobFailureRow(t.pool, id)).retry_message_id).toMatch(/^msg_/);
    expect((await jobFailureRow(t.pool, index)).retried_at).toBeNull();
    // The index's failures are still there to retry once its handler is fixed.
    expect((await browser.get("/dashboard/job-failures?subscription=corpus.index")).text).toContain(
      "Retry all 1 of corpus.index not yet retried",
    );
    // A page of a subscription that is none says so, rather than listing nothing.
    expect((await browser.get("/dashboard/job-failures?subscription=notify.mial")).status).toBe(400);
  });
});
