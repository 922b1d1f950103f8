import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { cookieName, signSession, SESSION_TTL_SECONDS } from "../../src/worker/dashboard/session.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { dashboardClient, ORIGIN, poison, stateOf } from "../support/dashboard.ts";
import { useTestDatabase } from "../support/db.ts";
import { resetOutbox } from "../support/relay.ts";
import { bindings } from "../support/worker.ts";

// Login, session, lock-out, cross-site posts and headers, through the app as the
// Worker runs it (Neon driver via the proxy to this file's database).
const t = useTestDatabase();
let proxy: WsProxy;
let env: Bindings;
const client = () => dashboardClient(() => env);

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  env = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address });
});
afterAll(() => proxy?.close());
beforeEach(async () => {
  await resetOutbox(t.pool);
  await t.pool.query("TRUNCATE dashboard_login_failures");
});

const PAGES = [
  "/dashboard",
  "/dashboard/events",
  "/dashboard/events/00000000-0000-4000-8000-000000000000",
  "/dashboard/poisoned",
  "/dashboard/alerts",
  "/dashboard/webhooks",
  "/dashboard/webhooks/00000000-0000-4000-8000-000000000000",
];

describe("sessions", () => {
  it("sends every page to the login form without a session, and back after signing in", async () => {
    const browser = client();
    for (const path of PAGES) {
      const page = await browser.get(path);
      expect(page.status, path).toBe(303);
      expect(page.headers.get("location")).toBe(`/dashboard/login?next=${encodeURIComponent(path)}`);
    }
    const form = await browser.get("/dashboard/login?next=%2Fdashboard%2Falerts");
    expect(form.status).toBe(200);
    expect(form.text).toContain('<input type="hidden" name="next" value="/dashboard/alerts"');

    const signedIn = await browser.post("/dashboard/login", {
      password: env.ADMIN_TOKEN!,
      next: "/dashboard/alerts",
    });
    expect(signedIn.status).toBe(303);
    expect(signedIn.headers.get("location")).toBe("/dashboard/alerts");
    expect((await browser.get("/dashboard/alerts")).status).toBe(200);
  });

  it("never redirects a login anywhere but the dashboard", async () => {
    for (const next of [
      "https://evil.example/",
      "//evil.example/x",
      "/\\evil.example",
      "/notes",
      "/dashboardx",
      "/dashboard\r\nSet-Cookie: x=y",
      "/dashboard/events?x=\u00e9",
    ]) {
      const res = await client().post("/dashboard/login", { password: env.ADMIN_TOKEN!, next });
      expect(res.status, next).toBe(303);
      expect(res.headers.get("location"), next).toBe("/dashboard");
    }
    // With a session, the form's GET redirects at once: a line break there was a 500.
    const browser = client();
    await browser.login();
    const again = await browser.get("/dashboard/login?next=/dashboard%0d%0aX:%20y");
    expect(again.status).toBe(303);
    expect(again.headers.get("location")).toBe("/dashboard");
    const kept = await browser.get(
      `/dashboard/login?next=${encodeURIComponent("/dashboard/events?state=poisoned")}`,
    );
    expect(kept.headers.get("location")).toBe("/dashboard/events?state=poisoned");
  });

  it("sets an HttpOnly, SameSite=Strict, 12-hour cookie, Secure and __Host- except on loopback http", async () => {
    const local = await client().login();
    const localCookie = local.headers.get("set-cookie")!;
    expect(localCookie).toMatch(/^outbox_session=[\w-]+\.[\w-]+\.[\w-]+;/);
    expect(localCookie).toMatch(/; HttpOnly/);
    expect(localCookie).toMatch(/; SameSite=Strict/);
    expect(localCookie).toMatch(new RegExp(`; Max-Age=${SESSION_TTL_SECONDS}(;|$)`));
    expect(SESSION_TTL_SECONDS).toBe(12 * 3600);
    expect(localCookie).not.toMatch(/Secure/);

    const deployed = dashboardClient(() => env, "https://outbox.example.com");
    const remote = await deployed.login();
    const remoteCookie = remote.headers.get("set-cookie")!;
    expect(remoteCookie).toMatch(/^__Host-outbox_session=/);
    expect(remoteCookie).toMatch(/; Secure/);
    expect(remoteCookie).toMatch(/; HttpOnly/);
    expect((await deployed.get("/dashboard")).status).toBe(200);
  });

  it("refuses a forged, foreign or expired session cookie", async () => {
    const browser = client();
    await browser.login();
    const good = browser.cookie!;
    const [name, token] = good.split("=") as [string, string];
    const [header, payload, signature] = token.split(".");
    const name0 = cookieName(false);
    expect(name).toBe(name0);

    const tampered = `${header}.${payload}.${signature!.slice(0, -2)}${signature!.endsWith("AA") ? "BB" : "AA"}`;
    // A payload claiming a later expiry under the old signature.
    const claims = JSON.parse(atob(payload!.replace(/-/g, "+").replace(/_/g, "/")));
    const stretched = btoa(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).replace(/=+$/, "");
    const secrets = { ADMIN_TOKEN: env.ADMIN_TOKEN!, WEBHOOK_SECRETS_KEY: env.WEBHOOK_SECRETS_KEY };
    const foreign = await signSession({ ...secrets, ADMIN_TOKEN: "another-deployments-admin-token-000" });
    // The right token without the deployment's secrets key: a session key anyone who
    // guessed the token could make, so a captured cookie would confirm the guess offline.
    const tokenOnly = await signSession({ ADMIN_TOKEN: env.ADMIN_TOKEN! });
    const otherKey = await signSession({ ...secrets, WEBHOOK_SECRETS_KEY: btoa("k".repeat(32)) });
    const expired = await signSession(secrets, Math.floor(Date.now() / 1000) - SESSION_TTL_SECONDS - 1);
    const unexpired = await signSession(secrets, Math.floor(Date.now() / 1000) - SESSION_TTL_SECONDS + 60);

    for (const [label, value] of Object.entries({
      tampered,
      stretched: `${header}.${stretched}.${signature}`,
      foreign,
      tokenOnly,
      otherKey,
      expired,
      garbage: "not-a-token",
    })) {
      const page = await browser.get("/dashboard", { cookie: `${name0}=${value}` });
      expect(page.status, label).toBe(303);
      expect(page.headers.get("location"), label).toMatch(/^\/dashboard\/login/);
    }
    expect((await browser.get("/dashboard", { cookie: `${name0}=${unexpired}` })).status).toBe(200);
    expect((await browser.get("/dashboard")).status).toBe(200);
  });

  it("signs out: the cookie is cleared and the old page needs a login again", async () => {
    const browser = client();
    await browser.login();
    const out = await browser.post("/dashboard/logout", {});
    expect(out.status).toBe(303);
    expect(out.headers.get("set-cookie")).toMatch(/^outbox_session=;.*Max-Age=0/);
    expect(browser.cookie).toBeUndefined();
    // Said where it lands: the form alone read as a session that had expired.
    expect(out.headers.get("location")).toBe("/dashboard/login?signedOut=1");
    expect((await browser.get("/dashboard/login?signedOut=1")).text).toContain(
      '<p class="notice" role="status">Signed out.</p>',
    );
    expect((await browser.get("/dashboard")).status).toBe(303);
  });

  it("keeps the JSON admin API on its bearer token: a session cookie is not enough", async () => {
    const browser = client();
    await browser.login();
    const res = await browser.get("/admin/stats");
    expect(res.status).toBe(401);
    const bearer = await browser.get("/admin/stats", { authorization: `Bearer ${env.ADMIN_TOKEN}` });
    expect(bearer.status).toBe(200);
  });
});

describe("wrong passwords", () => {
  const from = (ip: string) => ({ "CF-Connecting-IP": ip });
  // Addresses count where Cloudflare sets them: a Worker at a public URL.
  const client = () => dashboardClient(() => ({ ...env, PUBLIC_URL: "https://outbox.example.com" }));
  const local = () => dashboardClient(() => env);

  it("on a local Worker, counts every client in one bucket whatever address it names", async () => {
    // wrangler dev passes a client's own CF-Connecting-IP through: 7 made-up addresses
    // made 7 guesses and none was locked (security review).
    const statuses = [];
    for (let i = 1; i <= 6; i++)
      statuses.push((await local().login(`wrong-${i}`, from(`203.0.113.${i}`))).status);
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
    const admin = await local().get("/admin/stats", {
      Authorization: `Bearer ${env.ADMIN_TOKEN!}`,
      ...from("198.51.100.9"),
    });
    expect(admin.status).toBe(429);
    const { rows } = await t.pool.query("SELECT DISTINCT client FROM dashboard_login_failures");
    expect(rows).toEqual([{ client: "local" }]);
    // Both doors say how a developer locked out by their own script gets back in now.
    const lift = "DELETE FROM dashboard_login_failures";
    expect(JSON.parse(admin.text).error.message).toContain(lift);
    expect((await local().login(env.ADMIN_TOKEN!)).text).toContain(lift);
    await t.pool.query(lift);
    expect((await local().login(env.ADMIN_TOKEN!)).status).toBe(303);
  });

  it("locks an address out for 10 minutes after 5 wrong passwords in 10 minutes, counted in Postgres", async () => {
    const browser = client();
    for (let i = 1; i <= 4; i++) {
      const res = await browser.login(`wrong-${i}`, from("203.0.113.7"));
      expect(res.status, `attempt ${i}`).toBe(401);
      expect(res.text).toContain(
        "Wrong password. After 5 wrong ones from your address within 10 minutes, sign-in is refused for 10 minutes.",
      );
      expect(res.headers.get("set-cookie")).toBeNull();
    }
    const fifth = await browser.login("wrong-5", from("203.0.113.7"));
    expect(fifth.status).toBe(429);
    // Only a local Worker's lock-out tells how to lift it by hand.
    expect(fifth.text).not.toContain("dashboard_login_failures");
    expect(Number(fifth.headers.get("retry-after"))).toBeGreaterThan(590);
    expect(Number(fifth.headers.get("retry-after"))).toBeLessThanOrEqual(600);

    // Locked: even the right password is refused, and not compared, so not counted.
    const right = await browser.login(env.ADMIN_TOKEN!, from("203.0.113.7"));
    expect(right.status).toBe(429);
    expect(right.headers.get("set-cookie")).toBeNull();
    const { rows } = await t.pool.query(`SELECT client FROM dashboard_login_failures`);
    expect(rows).toEqual(Array(5).fill({ client: "203.0.113.7" }));

    // Another address is not affected.
    expect((await client().login(env.ADMIN_TOKEN!, from("198.51.100.1"))).status).toBe(303);

    // Nine minutes on, still locked; ten minutes after the fifth, free again.
    await t.pool.query(`UPDATE dashboard_login_failures SET failed_at = failed_at - interval '9 minutes'`);
    expect((await browser.login(env.ADMIN_TOKEN!, from("203.0.113.7"))).status).toBe(429);
    await t.pool.query(`UPDATE dashboard_login_failures SET failed_at = failed_at - interval '61 seconds'`);
    expect((await browser.login(env.ADMIN_TOKEN!, from("203.0.113.7"))).status).toBe(303);
  });

  it("does not lock out 5 wrong passwords spread over more than 10 minutes", async () => {
    for (let i = 0; i < 4; i++) await client().login("wrong", from("203.0.113.8"));
    await t.pool.query(`UPDATE dashboard_login_failures SET failed_at = failed_at - interval '11 minutes'`);
    expect((await client().login("wrong", from("203.0.113.8"))).status).toBe(401);
    expect((await client().login(env.ADMIN_TOKEN!, from("203.0.113.8"))).status).toBe(303);
    // A success removes what the lock-out can no longer read; the recent failure stays.
    await t.pool.query(`UPDATE dashboard_login_failures SET failed_at = failed_at - interval '10 minutes'`);
    await client().login(env.ADMIN_TOKEN!, from("203.0.113.8"));
    const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM dashboard_login_failures`);
    expect(rows[0].n).toBe(1);
  });

  it("counts wrong operator tokens at /admin/* in the same lock-out as the login form", async () => {
    // The login's password is the admin token: unlimited guesses at the API made the
    // form's lock-out pointless.
    const admin = (token: string, ip: string) =>
      client().get("/admin/stats", { Authorization: `Bearer ${token}`, ...from(ip) });
    for (let i = 1; i <= 4; i++) {
      const res = await admin(`wrong-${i}`, "203.0.113.10");
      expect(res.status, `attempt ${i}`).toBe(401);
      expect(res.headers.get("www-authenticate")).toContain('error="invalid_token"');
    }
    const fifth = await admin("wrong-5", "203.0.113.10");
    expect(fifth.status).toBe(429);
    expect(JSON.parse(fifth.text).error.code).toBe("TOO_MANY_REQUESTS");
    expect(Number(fifth.headers.get("retry-after"))).toBeGreaterThan(590);
    // Locked at both doors, even with the right token; another address is not.
    expect((await admin(env.ADMIN_TOKEN!, "203.0.113.10")).status).toBe(429);
    expect((await client().login(env.ADMIN_TOKEN!, from("203.0.113.10"))).status).toBe(429);
    expect((await admin(env.ADMIN_TOKEN!, "198.51.100.2")).status).toBe(200);
    // The right token, or no token at all, is not a failure.
    expect((await client().get("/admin/stats", from("198.51.100.3"))).status).toBe(401);
    const { rows } = await t.pool.query(
      "SELECT client, count(*)::int AS n FROM dashboard_login_failures GROUP BY client",
    );
    expect(rows).toEqual([{ client: "203.0.113.10", n: 5 }]);
  });

  it("locks out guesses spread over one IPv6 /64", async () => {
    const statuses = [];
    for (let i = 1; i <= 6; i++) {
      statuses.push((await client().login("wrong", from(`2001:db8:aa:bb::${i}`))).status);
    }
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
    expect((await client().login(env.ADMIN_TOKEN!, from("2001:db8:aa:bc::1"))).status).toBe(303);
  });

  it("compares only 5 of 12 guesses sent at once from one address", async () => {
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => client().login(`guess-${i}`, from("203.0.113.9"))),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses.filter((s) => s === 401)).toHaveLength(4);
    expect(statuses.filter((s) => s === 429)).toHaveLength(8);
    const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM dashboard_login_failures`);
    expect(rows[0].n).toBe(5);
  });
});

describe("cross-site posts and headers", () => {
  it("refuses a cross-site post even with a session, and changes nothing", async () => {
    const browser = client();
    await browser.login();
    const id = await poison(t.pool, "boom");
    for (const headers of [{ Origin: "https://evil.example" }, { Origin: "null" }]) {
      const forged = await browser.post("/dashboard/poisoned/requeue", { id }, headers);
      expect(forged.status).toBe(403);
      expect(forged.headers.get("content-type")).toMatch(/text\/html/);
      expect(forged.text).toContain("cross-site request refused");
      const forgedAll = await browser.post(
        "/dashboard/poisoned/requeue-all",
        { upTo: "2999-01-01T00:00:00Z" },
        headers,
      );
      expect(forgedAll.status).toBe(403);
    }
    const alert = await t.pool.query(
      `INSERT INTO outbox_alerts (kind, message) VALUES ('job.failed', 'x') RETURNING id`,
    );
    const forgedResolve = await browser.post(
      "/dashboard/alerts/resolve",
      { id: String(alert.rows[0].id) },
      { Origin: "https://evil.example" },
    );
    expect(forgedResolve.status).toBe(403);
    expect((await stateOf(t.pool, id)).poisoned_at).not.toBeNull();
    const { rows } = await t.pool.query(`SELECT resolved_at FROM outbox_alerts`);
    expect(rows[0].resolved_at).toBeNull();

    // A cross-site login post (login CSRF) is refused too, and sets no session.
    const forgedLogin = await client().post(
      "/dashboard/login",
      { password: env.ADMIN_TOKEN! },
      { Origin: "https://evil.example" },
    );
    expect(forgedLogin.status).toBe(403);
    expect(forgedLogin.headers.get("set-cookie")).toBeNull();
  });

  it("refuses a same-site post without a session", async () => {
    const id = await poison(t.pool, "boom");
    const res = await client().post("/dashboard/poisoned/requeue", { id });
    expect(res.status).toBe(401);
    expect((await stateOf(t.pool, id)).poisoned_at).not.toBeNull();
    // A page that says nothing was done and leads to the sign-in, not a line of plain text.
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.text).toContain("<title>Signed out · edge-outbox</title>");
    expect(res.text).toContain("Nothing was done: the form was sent without a dashboard session");
    expect(res.text).toContain('<a href="/dashboard/login">Sign in again</a>');
    // From a page of this dashboard, back to it once signed in; another site's Referer is not followed.
    const from = await client().post(
      "/dashboard/poisoned/requeue",
      { id },
      { Referer: `${ORIGIN}/dashboard/poisoned?track=1` },
    );
    expect(from.text).toContain(
      `<a href="/dashboard/login?next=%2Fdashboard%2Fpoisoned%3Ftrack%3D1">Sign in again</a>`,
    );
    const elsewhere = await client().post(
      "/dashboard/poisoned/requeue",
      { id },
      { Referer: "https://evil.example/dashboard/poisoned" },
    );
    expect(elsewhere.text).toContain('<a href="/dashboard/login">Sign in again</a>');
  });

  it("sends a CSP with no inline script, no framing, and no-store on pages", async () => {
    const browser = client();
    const login = await browser.get("/dashboard/login");
    await browser.login();
    for (const page of [login, await browser.get("/dashboard"), await browser.get("/dashboard/poisoned")]) {
      const csp = page.headers.get("content-security-policy")!;
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("default-src 'none'");
      // The script may read the dashboard's own pages (a watched page), nothing elsewhere.
      expect(csp).toContain("connect-src 'self'");
      expect(csp).not.toContain("unsafe-inline");
      const nonce = /script-src 'nonce-([\w+/=]+)'/.exec(csp)?.[1];
      expect(nonce).toBeDefined();
      // Every script on the page carries this response's nonce.
      const scripts = [...page.text.matchAll(/<script([^>]*)>/g)].map((m) => m[1]);
      expect(scripts.length).toBeGreaterThan(0);
      for (const attrs of scripts) expect(attrs).toBe(` nonce="${nonce}"`);
      expect(page.text).not.toMatch(/ style="|<style/);
      expect(page.headers.get("cache-control")).toBe("no-store");
      expect(page.headers.get("x-frame-options")).toBe("DENY");
    }
    const css = await browser.get("/dashboard/assets/dashboard.css");
    expect(css.status).toBe(200);
    expect(css.headers.get("content-type")).toMatch(/^text\/css/);
    // The icon every page names, served without a session, so no page asks for /favicon.ico.
    expect(login.text).toContain('<link rel="icon" href="/dashboard/assets/icon.svg"');
    const icon = await browser.get("/dashboard/assets/icon.svg");
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/svg+xml");
    expect(icon.text).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  });
});

// Loopback-http decision is by the request's own URL; here for the record of which hosts count.
it("treats only loopback http as exempt from Secure", async () => {
  const { isLoopbackHttp } = await import("../../src/worker/dashboard/session.ts");
  expect(isLoopbackHttp(ORIGIN)).toBe(true);
  expect(isLoopbackHttp("http://localhost:8787/dashboard")).toBe(true);
  expect(isLoopbackHttp("http://10.0.0.5/dashboard")).toBe(false);
  expect(isLoopbackHttp("https://127.0.0.1/dashboard")).toBe(false);
});
