import { mkdir } from "node:fs/promises";
import { chromium, type Browser, type Locator, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { importSecretsKey } from "../../src/domain/webhooks/secret-box.ts";
import { signingSecrets } from "../../src/domain/webhooks/secrets.ts";
import { startReceiver } from "../qstash-dev/receiver.ts";
import { newApiKey } from "../support/api-keys.ts";
import { poison } from "../support/dashboard.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { insertJobFailure, relayJobBody } from "../support/job-failures.ts";
import { waitFor } from "../support/helpers.ts";
import { insertEndpoint, verifyWebhook } from "../support/webhooks.ts";
import { TEST_WEBHOOK_SECRETS_KEY } from "../support/worker.ts";
import { request, useWorkerd } from "../support/workerd.ts";

// The dashboard in a real browser: Debian's Chromium (never a downloaded build),
// driven by playwright-core, against the real Worker bundle in workerd with the
// whole local stack. It does what an operator does when rows are stuck, and
// keeps a screenshot of every page in reports/screenshots for people to look at.
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SHOTS = new URL("../../reports/screenshots/", import.meta.url);

const t = useTestDatabase();
const stack = useWorkerd(t);
let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});
let browser: Browser;
let page: Page;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
const problems: string[] = [];

beforeAll(async () => {
  await mkdir(SHOTS, { recursive: true });
  receiver = await startReceiver();
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // A CSP violation, a script error or a resource that failed to load (the tab icon
  // included) is a defect even when the page still works. The one failure expected
  // is the 401 that answers a wrong password.
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const expected = m.text().includes("status of 401") && m.location().url.endsWith("/dashboard/login");
    if (!expected) problems.push(`${m.text()} (${m.location().url})`);
  });
  page.on("pageerror", (e) => problems.push(e.message));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await receiver?.close();
});

const shot = (name: string) =>
  page.screenshot({ path: new URL(`${name}.png`, SHOTS).pathname, fullPage: true });

/** Signs in afresh, whatever the tests before left behind. */
async function signIn() {
  await page.context().clearCookies();
  await page.goto(`${stack.url}/dashboard/login`);
  await page.fill("#password", stack.env.ADMIN_TOKEN!);
  await page.click("button[type=submit]");
  await page.waitForURL(`${stack.url}/dashboard`);
}

/**
 * Does what `act` does (a form's button), then waits until the page its redirect leads
 * to, whose address matches `url`, has loaded. Not waitForURL: the page takes its
 * notice's flags out of the address as it loads (layout.tsx, ONE_OFF_PARAMS), so
 * the address it would wait for may be gone by then.
 */
async function landsOn(url: RegExp, act: () => Promise<unknown>) {
  const landed = page.waitForResponse((r) => r.request().isNavigationRequest() && url.test(r.url()));
  await act();
  await landed;
  await page.waitForLoadState("load");
}

/** How far the page is wider than the window, in px (0 or less: not at all). */
const pageOverflow = () => page.evaluate(() => document.documentElement.scrollWidth - innerWidth);

/**
 * The lines each element's visible text takes: a label broken in two is 2. Words
 * for screen readers only (`.unseen`, clipped to a pixel) take no line.
 */
const lineCounts = (elements: Locator) =>
  elements.evaluateAll((all) =>
    all.map((el) => {
      const tops = new Set<number>();
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement?.closest(".unseen")) continue;
        const text = document.createRange();
        text.selectNodeContents(node);
        for (const rect of text.getClientRects()) tops.add(Math.round(rect.top));
      }
      return tops.size;
    }),
  );

/** Runs `check` with the window `width` px wide (the page reloaded), then puts it back. */
async function atWidth(width: number, check: () => Promise<void>) {
  const before = page.viewportSize()!;
  await page.setViewportSize({ width, height: before.height });
  await page.reload();
  try {
    await check();
  } finally {
    await page.setViewportSize(before);
    await page.reload();
  }
}

async function stateCounts(ids: string[]) {
  const { rows } = await t.pool.query(
    `SELECT count(*) FILTER (WHERE fanned_out_at IS NOT NULL)::int AS fanned,
            count(*) FILTER (WHERE poisoned_at IS NOT NULL)::int AS poisoned
       FROM events WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  return rows[0] as { fanned: number; poisoned: number };
}

describe("the dashboard in Chromium", () => {
  it("signs in, requeues a poisoned group, watches it fan out, and follows one event", async () => {
    // Traffic for the charts: notes written through the Worker, fanned out by the relay.
    for (let i = 0; i < 4; i++) {
      const res = await request(
        stack,
        "POST",
        "/notes",
        { title: `Note ${i}` },
        {
          Prefer: "wait=5",
          Authorization: `Bearer ${key}`,
        },
      );
      expect(res.status).toBe(201);
    }
    // An hour of earlier traffic, back-dated, so the charts have a shape: events
    // recorded and fanned a few seconds later, and webhook attempts (mostly 2xx).
    await t.pool.query(
      `INSERT INTO events (type, subject, payload, created_at, fanned_out_at, fanout)
       SELECT 'invoice.issued', 'history-' || m || '-' || k, '{}', now() - make_interval(mins => m, secs => k),
              now() - make_interval(mins => m, secs => k) + interval '2 seconds', '{}'
         FROM generate_series(1, 59) AS m, generate_series(1, 3 + (m * 7) % 9) AS k`,
    );
    // The fixture endpoints are real rows (secrets sealed under the Worker's key) whose
    // types match none of this test's events, so webhook.fanout sends them nothing.
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const historyEndpoint = await insertEndpoint(t.pool, secretsKey, {
      url: "https://hooks.acme.example/history",
      types: ["ledger.*"],
    });
    const [history] = (
      await t.pool.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body)
         VALUES ($1, gen_random_uuid(), 'invoice.issued', '{}') RETURNING id`,
        [historyEndpoint.id],
      )
    ).rows;
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status)
       SELECT $1, now() - make_interval(mins => m, secs => k), 40, CASE WHEN (m + k) % 6 = 0 THEN 500 ELSE 200 END
         FROM generate_series(1, 59) AS m, generate_series(1, 2 + (m * 5) % 7) AS k`,
      [history.id],
    );
    const rejected: string[] = [];
    for (let i = 0; i < 6; i++) {
      rejected.push(
        await poison(
          t.pool,
          `QStash 400: event '${i}f3a' rejected: subject "supplier-${i}" exceeds ${3000 + i * 17} bytes`,
          // Types only webhook.fanout takes, so nothing else fails on these made-up rows.
          i % 2 ? "invoice.paid" : "invoice.issued",
        ),
      );
    }
    await t.pool.query(
      `UPDATE events SET payload = jsonb_build_object('invoiceId', 'inv_' || seq, 'customer', 'Acme GmbH',
              'amount', 129.5, 'currency', 'EUR', 'lines', 3) WHERE id = ANY($1::uuid[])`,
      [rejected],
    );
    const malformed = [
      await poison(
        t.pool,
        `payload for ${crypto.randomUUID()} is not JSON: <script>alert(1)</script>`,
        "invoice.paid",
      ),
      await poison(
        t.pool,
        `payload for ${crypto.randomUUID()} is not JSON: <script>alert(1)</script>`,
        "invoice.paid",
      ),
    ];
    await seedEvents(t.pool, 3, { type: "invoice.issued" });
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, event_id, message)
       SELECT 'event.poisoned', id, 'event ' || id || ' poisoned after 5 attempts: ' || last_error
         FROM events WHERE id = ANY($1::uuid[])`,
      [malformed],
    );
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message) VALUES ('relay.lagging', 'oldest due event waited 312 s (threshold 300 s)')`,
    );

    // Signing in: the dashboard sends the browser to the login form and back.
    await page.goto(`${stack.url}/dashboard/poisoned`);
    expect(new URL(page.url()).pathname).toBe("/dashboard/login");
    await shot("login");
    await page.fill("#password", "not the token");
    await page.click("button[type=submit]");
    await expect.poll(() => page.textContent(".alert-box")).toContain("Wrong password.");
    await page.fill("#password", stack.env.ADMIN_TOKEN!);
    await page.click("button[type=submit]");
    await page.waitForURL(`${stack.url}/dashboard/poisoned`);

    // Two groups; the larger one is the rejected six, whatever their ids and sizes.
    const groups = page.locator("form.group");
    await expect.poll(() => groups.count()).toBe(2);
    const big = groups.filter({ hasText: "6 events" });
    expect(await big.locator("h2").textContent()).toBe(
      "QStash <n>: event <value> rejected: subject <value> exceeds <n> bytes",
    );
    // The enhancement script ran under the CSP: its "select all" box is shown.
    expect(await big.locator("label[data-select-all]").isVisible()).toBe(true);
    await shot("poisoned");

    await big.locator("summary", { hasText: "Requeue whole group (6)" }).click();
    await landsOn(/\/dashboard\/poisoned\?requeued=6&/, () =>
      big.getByRole("button", { name: "Yes, requeue 6" }).click(),
    );
    // The notice's numbers are taken out of the address once shown: a reload does not say it again.
    expect(page.url()).toBe(`${stack.url}/dashboard/poisoned`);
    expect(await page.textContent("#notice")).toContain("Requeued 6 events.");

    // The requeue kicked the relay; the page reloads itself until the rows are fanned.
    await waitFor(async () => (await stateCounts(rejected)).fanned === 6, 20_000);
    await expect
      .poll(async () => page.locator("#notice .state-fanned").count(), { timeout: 15_000, interval: 500 })
      .toBe(6);
    expect(await page.textContent("#notice")).toContain("All 6 shown were fanned out.");
    expect(await stateCounts(malformed)).toEqual({ fanned: 0, poisoned: 2 });
    await expect.poll(() => groups.count()).toBe(1);
    await shot("poisoned-after-requeue");

    // One of them, from write to receiver: a delivery with a retried attempt, written
    // here so its figures are fixed (deliveries made by the Worker are followed below).
    const endpoint = await insertEndpoint(t.pool, secretsKey, {
      url: "https://hooks.acme.example/outbox",
      types: ["ledger.*"],
      description: "Acme ERP",
    });
    const [delivery] = (
      await t.pool.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts, delivered_at, message_id)
         VALUES ($1, $2, 'invoice.issued', '{}', 'delivered', 2, now(), 'msg_webhook_1') RETURNING id`,
        [endpoint.id, rejected[0]],
      )
    ).rows;
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status, response_body)
       VALUES ($1, now() - interval '40 seconds', 5012, 503, 'upstream busy'), ($1, now(), 84, 200, 'ok')`,
      [delivery.id],
    );
    await page.click(`#notice a[href="/dashboard/events/${rejected[0]}"] >> nth=0`);
    await page.waitForURL(`${stack.url}/dashboard/events/${rejected[0]}`);
    const detail = (await page.textContent("main"))!;
    expect(detail).toContain("fanned");
    expect(detail).toMatch(/webhook\.fanout\s*QStash msg_/);
    expect(detail).toContain("https://hooks.acme.example/outbox");
    expect(detail).not.toContain("next attempt");
    expect(await page.locator("table").filter({ hasText: "upstream busy" }).locator("tr").count()).toBe(3);
    await shot("event-detail");

    // The receiver's side: the endpoint, its health and its deliveries.
    await page.click("text=https://hooks.acme.example/outbox");
    await page.waitForURL(`${stack.url}/dashboard/webhooks/${endpoint.id}`);
    expect(await page.textContent("main")).toContain("healthy");
    await page.click("nav >> text=Webhooks");
    expect(await page.locator("main table tr").count()).toBe(3);
    await shot("webhooks");
    await page.goBack();

    await page.click("nav >> text=Events");
    await page.selectOption("select[name=state]", "fanned");
    await page.click("form.filters button[type=submit]");
    await page.waitForURL(/state=fanned/);
    expect(await page.locator("main tbody tr, main table tr").count()).toBeGreaterThan(6);
    await shot("events");

    await page.click("nav >> text=Alerts");
    await expect.poll(() => page.locator("main table tr").count()).toBe(4);
    await shot("alerts");
    await page.locator("summary", { hasText: "Resolve all relay.lagging (1)" }).click();
    await page.getByRole("button", { name: "Yes, resolve all 1" }).click();
    await expect.poll(() => page.textContent(".notice")).toBe("Resolved 1 alert.");
    expect(await page.locator("main table tr").count()).toBe(3);

    await page.click("nav >> text=Overview");
    await page.waitForURL(`${stack.url}/dashboard`);
    const overview = (await page.textContent("main"))!;
    expect(overview).toMatch(/Poisoned\s*2/);
    expect(overview).toMatch(/Open alerts\s*2/);
    expect(await page.locator("svg polyline").count()).toBe(4);
    await shot("overview");
    // On a phone the charts' labels are read at the page's text size: drawn inside the
    // SVG they were about 6 px there and did not grow with the reader's text size.
    await atWidth(390, async () => {
      const sizes = await page.$$eval(".chart .y-axis span, .chart .x-axis span", (spans) =>
        spans.map((s) => Number.parseFloat(getComputedStyle(s).fontSize)),
      );
      expect(sizes.length).toBe(12);
      for (const px of sizes) expect(px).toBeGreaterThanOrEqual(12);
      expect(await page.locator(".chart .x-axis").first().textContent()).toMatch(/\d\d:\d\d UTC/);
      await shot("overview-390");
    });

    // A test event from an endpoint's page: through the Worker, QStash and the
    // deliver job to a real receiver, whose request verifies with the secret.
    const hook = await insertEndpoint(t.pool, secretsKey, {
      url: receiver.url("/acme-erp"),
      types: ["invoice.*"],
    });
    await t.pool.query(`UPDATE webhook_endpoints SET description = 'Acme ERP (staging)' WHERE id = $1`, [
      hook.id,
    ]);
    await page.click("nav >> text=Webhooks");
    await page.click(`a[href="/dashboard/webhooks/${hook.id}"]`);
    await landsOn(/\/dashboard\/webhooks\/deliveries\/[0-9a-f-]{36}\?tested=1$/, () =>
      page.getByRole("button", { name: "Send test event" }).click(),
    );
    expect(await page.textContent(".notice")).toContain("Test event sent.");
    // The page reloads itself until the delivery settles; then its attempt shows the receiver's 200.
    await expect
      .poll(async () => page.locator("h1 .state-delivered").count(), { timeout: 20_000, interval: 500 })
      .toBe(1);
    expect(await page.locator("table.attempts tr").count()).toBe(2);
    expect(await page.textContent("table.attempts")).toMatch(/200/);
    const [post] = receiver.received.filter((r) => r.path === "/acme-erp");
    expect(verifyWebhook(hook.secret, post!.body, post!.headers)).toMatchObject({ type: "webhook.test" });
    await shot("webhook-delivery");
    await page.click(`main a[href="/dashboard/webhooks/${hook.id}"]`);
    const row = page.locator("#deliveries tr").filter({ hasText: "webhook.test" });
    expect(await row.locator(".state-delivered").count()).toBe(1);
    expect(await page.textContent("main")).toContain("Acme ERP (staging)");
    await shot("webhook-endpoint");

    // The payload with a script tag rendered as text, and nothing on any page broke the CSP.
    await page.goto(`${stack.url}/dashboard/events/${malformed[0]}`);
    expect(await page.textContent("main")).toContain("<script>alert(1)</script>");
    expect(problems).toEqual([]);

    await landsOn(/\/dashboard\/login\?signedOut=1$/, () => page.click("header.top button[type=submit]"));
    expect(await page.textContent(".login .notice")).toBe("Signed out.");
    await page.goto(`${stack.url}/dashboard`);
    expect(new URL(page.url()).pathname).toBe("/dashboard/login");
  }, 120_000);

  it("long unbroken text (a receiver's 2 KB body, URLs, errors, subjects) wraps instead of widening the page", async () => {
    // A receiver once answered 503 with 2 KB and no spaces: the delivery page was 15,007 px wide.
    const unbroken = (prefix: string, bytes: number) =>
      (prefix + "Zm9vYmFyYmF6cXV4".repeat(Math.ceil(bytes / 16))).slice(0, bytes);
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const endpoint = await insertEndpoint(t.pool, secretsKey, {
      url: unbroken("https://hooks.acme.example/outbox/v2/receive?token=", 300),
      types: ["ledger.*"],
    });
    // Already fanned and of a type only that endpoint takes: the relay leaves these rows alone.
    const [eventId] = await seedEvents(t.pool, 1, {
      type: "ledger.posted",
      subject: () => unbroken("ledger-", 300),
      fanned: true,
    });
    await t.pool.query(`UPDATE events SET payload = jsonb_build_object('blob', $2::text) WHERE id = $1`, [
      eventId,
      unbroken("", 2048),
    ]);
    const [delivery] = (
      await t.pool.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts, failed_at, last_error)
         VALUES ($1, $2, 'ledger.posted', '{}', 'failed', 2, now(), $3) RETURNING id`,
        [endpoint.id, eventId, `endpoint answered 503: ${unbroken("", 400)}`],
      )
    ).rows;
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status, error, response_body)
       VALUES ($1, now() - interval '1 minute', 10000, NULL, 'timeout', NULL),
              ($1, now(), 212, 503, NULL, $2)`,
      [delivery.id, unbroken("upstream_unavailable:", 2048)],
    );
    await poison(t.pool, `QStash 400: ${unbroken("rejected:", 600)}`, "ledger.posted");

    await signIn();

    const overflow = () =>
      page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    const wide: Record<string, number> = {};
    for (const path of [
      `/dashboard/webhooks/deliveries/${delivery.id}`,
      `/dashboard/events/${eventId}`,
      `/dashboard/webhooks/${endpoint.id}`,
      "/dashboard/webhooks",
      "/dashboard/events",
      "/dashboard/poisoned",
      "/dashboard",
    ]) {
      await page.goto(`${stack.url}${path}`);
      const px = await overflow();
      if (px > 1) wide[path] = px;
    }
    expect(wide, "pages wider than the window, by px").toEqual({});

    await page.goto(`${stack.url}/dashboard/webhooks/deliveries/${delivery.id}`);
    const cell = page.locator("table.attempts td.mono").filter({ hasText: "upstream_unavailable:" });
    // Wrapped, not cut: all 2 KB are on the page, inside the table's width.
    expect((await cell.textContent())!.length).toBe(2048);
    const [table, body] = await Promise.all([
      page.locator("table.attempts").boundingBox(),
      cell.boundingBox(),
    ]);
    expect(body!.x + body!.width).toBeLessThanOrEqual(table!.x + table!.width + 1);
    // The other columns keep a readable width beside it: a short error stays on one line.
    const errorLines = await page
      .locator("table.attempts td.error")
      .filter({ hasText: "timeout" })
      .evaluate((td) => {
        const text = document.createRange();
        text.selectNodeContents(td);
        return text.getClientRects().length;
      });
    expect(errorLines).toBe(1);
    await shot("webhook-delivery-long-body");
    await page.goto(`${stack.url}/dashboard/events/${eventId}`);
    await shot("event-detail-long-text");
    expect(problems).toEqual([]);
  }, 60_000);

  it("retries every failed job at once from the overview, and the jobs run", async () => {
    // Three corpus.index jobs that ran out of retries (their notes are gone, so the
    // subscriber's answer on a retry is to drop them from the index: a 200).
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push(
        await insertJobFailure(t.pool, {
          subscription: "corpus.index",
          body: relayJobBody("corpus.index", { type: "corpus.note.deleted" }),
        }),
      );
    }
    // One route answered with a long run of JSON, no spaces to wrap at: the other
    // columns were squeezed for it, and a Retry button read "Retr" / "y".
    await t.pool.query(
      `UPDATE job_failures SET event_id = gen_random_uuid(),
              response_body = '{"error":"index_unavailable","detail":"upstream answered 503 Service Unavailable","retryAfter":30}'
        WHERE id = $1`,
      [ids[0]],
    );
    await signIn();
    await shot("overview-job-failures");
    // Each Retry names its row for a screen reader ("Retry job failure 12"), the eye
    // reading the row; the eight cards fit one row at 1280 px (the 7th, then the 8th, wrapped alone).
    const retryButtons = page.getByRole("button", { name: /^Retry job failure \d+$/ });
    expect(await lineCounts(retryButtons)).toEqual([1, 1, 1]);
    expect(
      await page.$$eval(
        ".cards .card",
        (cards) => new Set(cards.map((c) => c.getBoundingClientRect().top)).size,
      ),
    ).toBe(1);
    // In a narrow window the table scrolls in its own box: the page keeps its width.
    await atWidth(800, async () => {
      expect(await pageOverflow()).toBeLessThanOrEqual(0);
      expect(await lineCounts(retryButtons)).toEqual([1, 1, 1]);
      await shot("overview-job-failures-800");
    });
    // One Enter only says what a Retry all would do; its own button does it.
    await page.locator("summary", { hasText: "Retry all 3 not yet retried" }).focus();
    await page.keyboard.press("Enter");
    expect(await page.textContent("details.confirm[open] .confirm-body p")).toBe(
      "Publishes 3 jobs to QStash again, each a new job its subscriber runs again.",
    );
    const untouched = await t.pool.query(
      "SELECT count(*)::int AS n FROM job_failures WHERE retried_at IS NOT NULL AND id = ANY($1::bigint[])",
      [ids],
    );
    expect(untouched.rows[0].n).toBe(0);
    await shot("overview-retry-all-confirm");
    await landsOn(/\/dashboard\?retriedAll=3$/, () =>
      page.getByRole("button", { name: "Yes, retry all 3" }).click(),
    );
    expect(page.url()).toBe(`${stack.url}/dashboard`);
    expect(await page.textContent(".notice")).toContain("Retried 3 job failures");
    // Focus is on what the action did, not at the top of the page.
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("notice");
    // Nor does the page reload under the keyboard: only when asked.
    expect(await page.$$("meta[http-equiv=refresh]")).toHaveLength(0);
    const { rows } = await t.pool.query(
      "SELECT retry_message_id FROM job_failures WHERE id = ANY($1::bigint[]) ORDER BY id",
      [ids],
    );
    const messageIds = rows.map((r) => r.retry_message_id as string);
    for (const m of messageIds) expect(await page.textContent("body")).toContain(`as ${m}`);
    expect(await page.getByRole("button", { name: /Retry/ }).count()).toBe(0);
    await shot("overview-job-failures-retried");
    await atWidth(800, async () => {
      expect(await pageOverflow()).toBeLessThanOrEqual(0);
      await shot("overview-job-failures-retried-800");
    });
    // QStash delivered each new job to its route, signed, and the Worker took it.
    for (const m of messageIds) {
      const settled = await stack.qstash.waitForSettled(m, 30_000);
      expect(settled.state, m).toBe("DELIVERED");
      expect(settled.url).toBe(`${stack.env.PUBLIC_URL}/jobs/corpus.index`);
    }
    expect(problems).toEqual([]);
  }, 60_000);

  it("follows the overview to all job failures and retries one there, back on that page", async () => {
    const id = await insertJobFailure(t.pool, {
      subscription: "corpus.index",
      body: relayJobBody("corpus.index", { type: "corpus.note.deleted" }),
    });
    await signIn();
    // The first Tab stop skips the header's seven to the page itself.
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
    await page.keyboard.press("Enter");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("main");
    await page.click("text=All job failures →");
    await page.waitForURL(`${stack.url}/dashboard/job-failures`);
    expect(await page.getAttribute("nav a[aria-current=page]", "href")).toBe("/dashboard/job-failures");
    await shot("job-failures");
    await landsOn(new RegExp(`/dashboard/job-failures\\?retried=${id}$`), () =>
      page.locator(`form[action="/dashboard/job-failures/${id}/retry"] button`).click(),
    );
    expect(await page.textContent(".notice")).toContain(`Job failure ${id} retried`);
    expect(problems).toEqual([]);
  }, 60_000);

  it("every page fits a phone and a narrow window: the header's links wrap, a list's rows stack, tables scroll in their own box", async () => {
    // At 390 px the header's links ran 210 px past the window, light text on the
    // page's light background, and an endpoint's deliveries made its page 1,168 px wide.
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const endpoint = await insertEndpoint(t.pool, secretsKey, {
      url: "https://hooks.acme.example/outbox",
      types: ["ledger.*"],
    });
    const [eventId] = await seedEvents(t.pool, 1, { type: "ledger.posted", fanned: true });
    const [delivery] = (
      await t.pool.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts, next_attempt_at, last_error)
         VALUES ($1, $2, 'ledger.posted', '{}', 'pending', 1, now() + interval '1 minute', 'endpoint answered 500')
         RETURNING id`,
        [endpoint.id, eventId],
      )
    ).rows;
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status, error, response_body)
       VALUES ($1, now(), 12, 500, NULL, 'nope')`,
      [delivery.id],
    );
    await poison(t.pool, "QStash 400: invalid destination", "ledger.posted");
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message) VALUES ('relay.lagging', 'oldest due event waited 312 s (threshold 300 s)')`,
    );
    await insertJobFailure(t.pool, { subscription: "corpus.index", body: relayJobBody("corpus.index") });

    await signIn();
    const paths = [
      "/dashboard",
      "/dashboard/events",
      `/dashboard/events/${eventId}`,
      "/dashboard/poisoned",
      "/dashboard/alerts",
      "/dashboard/job-failures",
      "/dashboard/webhooks",
      `/dashboard/webhooks/${endpoint.id}`,
      `/dashboard/webhooks/deliveries/${delivery.id}`,
    ];
    const misfits: Record<string, unknown> = {};
    for (const width of [360, 800, 1280]) {
      await page.setViewportSize({ width, height: 900 });
      for (const path of paths) {
        await page.goto(`${stack.url}${path}`);
        const px = await pageOverflow();
        if (px > 0) misfits[`${width} ${path}: page wider than the window by`] = px;
        // A table wider than its box can be reached and scrolled by keyboard; one that fits is no stop.
        const unreachable = await page.$$eval(".scroll", (boxes) =>
          boxes
            .filter((b) => b.scrollWidth > b.clientWidth !== (b.tabIndex === 0))
            .map((b) => `${b.scrollWidth}/${b.clientWidth} tabindex ${b.getAttribute("tabindex")}`),
        );
        if (unreachable.length > 0) misfits[`${width} ${path}: scroll boxes`] = unreachable;
        // What a row says and what can be done to it are seen without scrolling sideways:
        // at 375 px an alert's message and its Resolve button sat past the window's edge.
        const offscreen = await page.$$eval("table button, table td.error", (all) =>
          all
            .filter((el) => {
              const r = el.getBoundingClientRect();
              return r.left < 0 || r.right > innerWidth;
            })
            .map((el) => `${el.tagName.toLowerCase()} ${el.textContent!.trim().slice(0, 30)}`),
        );
        if (offscreen.length > 0) misfits[`${width} ${path}: past the window's edge`] = offscreen;
        // A stacked row's cells are led by their column's name: each cell's label is its header's.
        const mislabelled = await page.$$eval("table.stack", (tables) =>
          tables.flatMap((table) => {
            const rows = [...table.querySelectorAll("tr")];
            const head = rows.find((r) => r.querySelector("th"));
            const names = [...(head?.querySelectorAll("th") ?? [])].map((th) => th.textContent!.trim());
            return rows
              .filter((r) => r !== head)
              .map((r) => [...r.querySelectorAll("td")].map((td) => td.dataset.label ?? "(none)"))
              .filter((labels) => labels.join("|") !== names.join("|"))
              .map((labels) => `${labels.join("|")} under ${names.join("|")}`);
          }),
        );
        if (mislabelled.length > 0) misfits[`${width} ${path}: labels`] = mislabelled;
        // A cell is as tall as its label: beside an empty cell (no error) the label ran
        // onto the next row's, and a label that wraps onto the next cell's.
        const squeezed = await page.$$eval("table.stack td", (cells) =>
          cells
            .filter((td) => getComputedStyle(td).display !== "table-cell")
            .filter(
              (td) =>
                td.getBoundingClientRect().height + 0.5 < parseFloat(getComputedStyle(td, "::before").height),
            )
            .map((td) => `${td.dataset.label}: ${td.getBoundingClientRect().height} px`),
        );
        if (squeezed.length > 0) misfits[`${width} ${path}: cells shorter than their label`] = squeezed;
        // Every link and the sign-out button inside the window and on the header's dark band.
        const outside = await page.evaluate(() => {
          const band = document.querySelector("header.top")!.getBoundingClientRect();
          return [...document.querySelectorAll("header.top a, header.top button")]
            .filter((el) => {
              const r = el.getBoundingClientRect();
              return r.left < 0 || r.right > innerWidth || r.right > band.right || r.bottom > band.bottom;
            })
            .map((el) => el.textContent);
        });
        if (outside.length > 0) misfits[`${width} ${path}: off the header`] = outside;
      }
      await page.goto(`${stack.url}/dashboard/webhooks/${endpoint.id}`);
      await shot(`webhook-endpoint-${width}`);
      await page.goto(`${stack.url}/dashboard`);
      await shot(`overview-${width}`);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    expect(misfits, JSON.stringify(misfits)).toEqual({});
    expect(problems).toEqual([]);
  }, 60_000);

  it("edits an endpoint's URL and event types from its page, keeping its description's lines", async () => {
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    // Two lines, as the API takes them: a one-line input in the form dropped the break.
    const description = "Acme ledger sync\nowner: payments team";
    const endpoint = await insertEndpoint(t.pool, secretsKey, {
      url: "https://hooks.acme.example/wrong-path",
      types: ["ledger.*"],
      description,
    });
    await signIn();
    await page.goto(`${stack.url}/dashboard/webhooks/${endpoint.id}`);
    await page.click("details.edit summary");
    await page.fill("#url", "https://hooks.acme.example/right-path");
    await page.fill("#types", "ledger.*, supplier.connected");
    await shot("webhook-endpoint-edit");
    await landsOn(/\?edited=1$/, () => page.getByRole("button", { name: "Save" }).click());
    expect(await page.textContent("h1")).toBe("https://hooks.acme.example/right-path");
    expect(await page.textContent(".notice")).toContain("Endpoint saved");
    // The notice's flag is taken out of the address: a reload or a bookmark does not say
    // it again, as if saved again.
    await page.waitForURL(`${stack.url}/dashboard/webhooks/${endpoint.id}`);
    await page.reload();
    expect(await page.locator(".notice").count()).toBe(0);
    const read = async () =>
      (
        await t.pool.query("SELECT url, types, description FROM webhook_endpoints WHERE id = $1", [
          endpoint.id,
        ])
      ).rows[0];
    expect(await read()).toEqual({
      url: "https://hooks.acme.example/right-path",
      types: ["ledger.*", "supplier.connected"],
      description,
    });
    // Shown on its two lines, and a third typed into the form is stored with LF, as the API's.
    expect(await page.innerText("p.desc")).toBe(description);
    await page.click("details.edit summary");
    await page.fill("#description", `${description}\nescalate: #ledger-oncall`);
    await landsOn(/\?edited=1$/, () => page.getByRole("button", { name: "Save" }).click());
    expect((await read()).description).toBe(`${description}\nescalate: #ledger-oncall`);
    expect(problems).toEqual([]);
  }, 60_000);

  it("watches a slow test delivery in place: focus stays where the keyboard put it, and the outcome is said once", async () => {
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const hook = await insertEndpoint(t.pool, secretsKey, {
      url: receiver.url("/slow-erp"),
      types: ["ledger.*"],
    });
    // The receiver holds the request until the test lets it answer.
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    const before = receiver.state.respond;
    receiver.state.respond = async (r) => {
      if (r.path === "/slow-erp") await answered;
      return { status: 200, body: "ok" };
    };
    try {
      await signIn();
      await page.goto(`${stack.url}/dashboard/webhooks/${hook.id}`);
      await landsOn(/\/dashboard\/webhooks\/deliveries\/[0-9a-f-]{36}\?tested=1$/, () =>
        page.getByRole("button", { name: "Send test event" }).click(),
      );
      await receiver.waitForRequests(1, "/slow-erp", 20_000);
      expect(await page.textContent("p.live")).toMatch(
        /^Watching: what settles shows here, without a reload\. Stop watching$/,
      );
      // What a keyboard user does meanwhile: Tab on to Redeliver. A page that reloaded
      // itself every 2 s sent focus back to the top (and dropped this mark).
      await page.evaluate(() => ((window as unknown as { mark: number }).mark = 1));
      const redeliver = page.getByRole("button", { name: "Redeliver this delivery" });
      await redeliver.focus();
      await page.waitForTimeout(5_000);
      expect(await page.evaluate(() => (window as unknown as { mark?: number }).mark)).toBe(1);
      expect(await redeliver.evaluate((el) => el === document.activeElement)).toBe(true);
      expect(await page.locator("h1 .state-pending").count()).toBe(1);

      answer();
      await expect
        .poll(async () => page.locator("h1 .state-delivered").count(), { timeout: 20_000, interval: 250 })
        .toBe(1);
      // The same document, changed once, its notice focused so the outcome is read out.
      expect(await page.evaluate(() => (window as unknown as { mark?: number }).mark)).toBe(1);
      expect(await page.evaluate(() => document.activeElement?.id)).toBe("notice");
      expect(await page.textContent("#notice")).toBe("Test event sent. It was delivered.");
      expect(await page.locator("p.live").count()).toBe(0);
      expect(await page.textContent("table.attempts")).toMatch(/200/);
      await shot("webhook-delivery-watched");
      expect(problems).toEqual([]);
    } finally {
      answer();
      receiver.state.respond = before;
    }
  }, 90_000);

  it("tells a screen reader what a sighted operator sees: the sign-in's refusal, a stacked table's headers, a payload box", async () => {
    // Chromium's own accessibility tree, as assistive technology reads it.
    const tree = async () => {
      const cdp = await page.context().newCDPSession(page);
      try {
        const { nodes } = (await cdp.send("Accessibility.getFullAXTree")) as {
          nodes: {
            role?: { value: string };
            name?: { value: string };
            description?: { value: string };
            properties?: { name: string; value: { value: unknown } }[];
          }[];
        };
        return nodes.map((n) => ({
          role: n.role?.value,
          name: n.name?.value,
          description: n.description?.value,
          invalid: n.properties?.find((p) => p.name === "invalid")?.value.value,
          focusable: n.properties?.find((p) => p.name === "focusable")?.value.value,
        }));
      } finally {
        await cdp.detach();
      }
    };
    await page.context().clearCookies();
    await page.goto(`${stack.url}/dashboard/login`);
    await page.fill("#password", "not the token");
    await page.click("button[type=submit]");
    await expect.poll(() => page.textContent(".alert-box")).toContain("Wrong password.");
    // The field focus lands on says why it was refused, and that it was.
    expect((await tree()).find((n) => n.role === "textbox")).toMatchObject({
      name: "Password (the Worker's ADMIN_TOKEN)",
      description:
        "Wrong password. After 5 wrong ones from your address within 10 minutes, sign-in is refused for 10 minutes.",
      invalid: "true",
    });

    await signIn();
    const [id] = (await seedEvents(t.pool, 1, { type: "invoice.issued" })) as [string];
    await t.pool.query(
      `UPDATE events SET payload = jsonb_build_object('lines', (SELECT jsonb_agg(n) FROM generate_series(1, 400) n)) WHERE id = $1`,
      [id],
    );
    // Below 70rem a list's rows stack and its header row is not drawn; its headers are still there to read.
    await page.setViewportSize({ width: 1024, height: 900 });
    try {
      await page.goto(`${stack.url}/dashboard/events`);
      const drawn = await page.locator("main table tr:has(> th)").boundingBox();
      expect(drawn!.width * drawn!.height).toBeLessThanOrEqual(1);
      const headers = (await tree())
        .filter((n) => n.role === "columnheader")
        .map((n) => n.name?.toLowerCase());
      expect(headers).toEqual(expect.arrayContaining(["seq", "type", "state"]));
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
    // A long payload scrolls in its box: a named stop the keyboard can scroll in any browser.
    await page.goto(`${stack.url}/dashboard/events/${id}`);
    expect((await tree()).find((n) => n.role === "region" && n.name === "payload")).toMatchObject({
      focusable: true,
    });
    expect(problems).toEqual([]);
  }, 60_000);

  it("reloading the page that shows a new secret does not rotate it again", async () => {
    const secretsKey = importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const endpoint = await insertEndpoint(t.pool, secretsKey, {
      url: "https://hooks.acme.example/rotate",
      types: ["ledger.*"],
    });
    const secrets = async () => {
      const { rows } = await t.pool.query(
        `SELECT id, secret_box AS "secretBox", previous_secret_box AS "previousSecretBox",
                previous_secret_expires_at AS "previousSecretExpiresAt"
           FROM webhook_endpoints WHERE id = $1`,
        [endpoint.id],
      );
      return signingSecrets(await secretsKey, rows[0], new Date());
    };
    await signIn();
    await page.goto(`${stack.url}/dashboard/webhooks/${endpoint.id}`);
    // Escape closes a confirmation from its own button, focus back on what opened it.
    const rotate = page.locator("summary", { hasText: "Rotate secret" });
    await rotate.click();
    await page.getByRole("button", { name: "Yes, rotate the secret" }).focus();
    await page.keyboard.press("Escape");
    expect(
      await page.locator("details.confirm:has(summary:text('Rotate secret'))").getAttribute("open"),
    ).toBeNull();
    expect(await rotate.evaluate((el) => el === document.activeElement)).toBe(true);
    expect(await secrets()).toEqual([endpoint.secret]);
    await rotate.click();
    await page.getByRole("button", { name: "Yes, rotate the secret" }).click();
    await page.waitForURL(`${stack.url}/dashboard/webhooks/${endpoint.id}/rotate-secret`);
    const copied = (await page.textContent("#secret"))!;
    expect(await secrets()).toEqual([copied, endpoint.secret]);

    // What the operator did: reload, and let the browser send the form again.
    const reloaded = await page.reload();
    expect(reloaded!.request().method()).toBe("POST");
    expect(reloaded!.status()).toBe(409);
    expect(await page.textContent("h1")).toBe("Secret already rotated");
    expect(await page.locator("#secret").count()).toBe(0);
    expect(await secrets()).toEqual([copied, endpoint.secret]);
    await shot("webhook-secret-already-rotated");
    // The 409 is the one console error this page is expected to have.
    problems.splice(0, problems.length, ...problems.filter((p) => !p.includes("status of 409")));
    expect(problems).toEqual([]);
  }, 60_000);
});
