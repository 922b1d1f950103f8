import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { importSecretsKey, openSecret } from "../../src/domain/webhooks/secret-box.ts";
import { signingSecrets } from "../../src/domain/webhooks/secrets.ts";
import { signHeaders } from "../../src/domain/webhooks/signing.ts";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { bindings, call, TEST_WEBHOOK_SECRETS_KEY, type Answer } from "../support/worker.ts";
import { refusedUrls } from "../webhooks/ssrf-cases.ts";

// The app as the Worker runs it: the Neon driver over WebSockets, through the
// local proxy, to this file's database.
const t = useTestDatabase();
let proxy: WsProxy;
let env: Bindings;
const app = createApp();
const token = "admin-token-for-tests-0123456789";
const auth = { headers: { authorization: `Bearer ${token}` } };
const missing = "00000000-0000-4000-8000-000000000000";

beforeAll(async () => {
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  env = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address });
});
afterAll(() => proxy?.close());
afterEach(() => vi.restoreAllMocks());

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const admin = <T = any>(method: string, path: string, body?: unknown, over: Partial<Bindings> = {}) =>
  call<T>(app, { ...env, ...over }, method, path, body, auth);

async function create(body: Record<string, unknown>, over: Partial<Bindings> = {}) {
  const res = await admin("POST", "/admin/webhooks/endpoints", body, over);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body as { endpoint: { id: string } & Record<string, unknown>; secret: string };
}

async function endpointRow(id: string) {
  const { rows } = await t.pool.query<{
    id: string;
    secretBox: string;
    previousSecretBox: string | null;
    previousSecretExpiresAt: Date | null;
  }>(
    `SELECT id, secret_box AS "secretBox", previous_secret_box AS "previousSecretBox",
            previous_secret_expires_at AS "previousSecretExpiresAt"
       FROM webhook_endpoints WHERE id = $1`,
    [id],
  );
  return rows[0]!;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function issuePaths(res: Answer<any>) {
  return (res.body.error.issues as { path: string }[]).map((i) => i.path);
}

describe("webhook endpoint routes: security", () => {
  const routes: [string, string][] = [
    ["POST", "/admin/webhooks/endpoints"],
    ["GET", "/admin/webhooks/endpoints"],
    ["GET", `/admin/webhooks/endpoints/${missing}`],
    ["PATCH", `/admin/webhooks/endpoints/${missing}`],
    ["DELETE", `/admin/webhooks/endpoints/${missing}`],
    ["POST", `/admin/webhooks/endpoints/${missing}/rotate-secret`],
    ["GET", `/admin/webhooks/endpoints/${missing}/deliveries`],
    ["GET", `/admin/webhooks/deliveries/${missing}`],
  ];

  // Each route's wrong guess from an address of its own: five from one would lock it
  // out (the dashboard's lock-out counts wrong operator tokens too).
  let guesser = 0;
  it.each(routes)("%s %s needs the operator token", async (method, path) => {
    const body = method === "POST" || method === "PATCH" ? { url: "https://example.com" } : undefined;
    const none = await call(app, env, method, path, body);
    expect(none.status).toBe(401);
    expect(none.body.error.code).toBe("UNAUTHORIZED");
    // A fresh address per guess counts only where the address is Cloudflare's to set.
    const deployed = { ...env, PUBLIC_URL: "https://outbox.example.com" };
    const wrong = await call(app, deployed, method, path, body, {
      headers: {
        authorization: "Bearer not-the-admin-token-000000",
        "CF-Connecting-IP": `198.51.100.${++guesser}`,
      },
    });
    expect(wrong.status).toBe(401);
  });

  it("every SSRF case is a 400 naming the field url, and nothing is stored", async () => {
    for (const [url, reason] of refusedUrls) {
      const res = await admin("POST", "/admin/webhooks/endpoints", { url, scope: null });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe("BAD_REQUEST");
      expect(res.body.error.issues, url).toEqual([{ path: "url", message: expect.stringMatching(reason) }]);
    }
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM webhook_endpoints");
    expect(rows[0].n).toBe(0);
  });

  it("PATCH refuses the same URLs", async () => {
    const { endpoint } = await create({ url: "https://ssrf-patch.example.com/", scope: null });
    for (const url of ["https://169.254.169.254/", "https://[::ffff:7f00:1]/", "http://example.com/"]) {
      const res = await admin("PATCH", `/admin/webhooks/endpoints/${endpoint.id}`, { url });
      expect(res.status, url).toBe(400);
      expect(issuePaths(res)).toEqual(["url"]);
    }
    const got = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}`);
    expect(got.body.endpoint.url).toBe("https://ssrf-patch.example.com/");
  });

  it("WEBHOOK_ALLOW_PRIVATE_URLS=true admits local receivers, still only http(s) and never credentials", async () => {
    const relaxed = { WEBHOOK_ALLOW_PRIVATE_URLS: "true" };
    const local = await admin(
      "POST",
      "/admin/webhooks/endpoints",
      { url: "http://127.0.0.1:4000/webhooks", scope: null },
      relaxed,
    );
    expect(local.status).toBe(201);
    expect(local.body.endpoint.url).toBe("http://127.0.0.1:4000/webhooks");
    for (const [url, reason] of [
      ["ftp://127.0.0.1/", /must use http or https/],
      ["http://user:secret@127.0.0.1:4000/", /credentials/],
    ] as const) {
      const res = await admin("POST", "/admin/webhooks/endpoints", { url, scope: null }, relaxed);
      expect(res.status, url).toBe(400);
      expect(res.body.error.issues).toEqual([{ path: "url", message: expect.stringMatching(reason) }]);
    }
  });

  it("a secret never appears in any GET answer or log line, after a create and a rotation", async () => {
    const lines: string[] = [];
    for (const level of ["log", "info", "warn", "error", "debug"] as const) {
      vi.spyOn(console, level).mockImplementation(
        (...args: unknown[]) => void lines.push(args.map(String).join(" ")),
      );
    }
    const created = await create({
      url: "https://no-leak.example.com/",
      scope: "leak",
      types: ["supplier.*"],
    });
    const id = created.endpoint.id;
    const rotated = await admin("POST", `/admin/webhooks/endpoints/${id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    const secrets: string[] = [created.secret, rotated.body.secret];
    expect(secrets[0]).not.toBe(secrets[1]);
    await seedDelivery(id, { status: "delivered", attempts: [200] });
    const deliveryId = (await t.pool.query("SELECT id FROM webhook_deliveries WHERE endpoint_id = $1", [id]))
      .rows[0].id;

    const answers = await Promise.all(
      [
        "/admin/webhooks/endpoints",
        "/admin/webhooks/endpoints?scope=leak",
        `/admin/webhooks/endpoints/${id}`,
        `/admin/webhooks/endpoints/${id}/deliveries`,
        `/admin/webhooks/deliveries/${deliveryId}`,
      ].map((path) => admin("GET", path)),
    );
    // A PATCH answers with the endpoint too: it must not carry the secret either.
    answers.push(await admin("PATCH", `/admin/webhooks/endpoints/${id}`, { description: "patched" }));
    for (const res of answers) {
      expect(res.status).toBe(200);
      const text = JSON.stringify(res.body);
      expect(text).not.toContain("whsec_");
      for (const secret of secrets) {
        expect(text).not.toContain(secret);
        expect(text).not.toContain(secret.slice("whsec_".length));
      }
      // Nor the sealed boxes: they are for the Worker alone.
      expect(text).not.toMatch(/"v1\.[A-Za-z0-9+/=]+\.[A-Za-z0-9+/=]+"/);
    }
    const logged = lines.join("\n");
    expect(logged).not.toContain("whsec_");
    for (const secret of secrets) expect(logged).not.toContain(secret.slice("whsec_".length));
  });

  it("the stored row holds only sealed secrets, which open under WEBHOOK_SECRETS_KEY for that endpoint only", async () => {
    const { endpoint, secret } = await create({ url: "https://at-rest.example.com/", scope: null });
    const { rows } = await t.pool.query("SELECT * FROM webhook_endpoints WHERE id = $1", [endpoint.id]);
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(secret.slice("whsec_".length));
    const key = await importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    expect(await openSecret(key, rows[0].secret_box, endpoint.id)).toBe(secret);
    await expect(openSecret(key, rows[0].secret_box, missing)).rejects.toThrow();
  });
});

describe("webhook endpoint routes: create, list, get, patch, delete", () => {
  it("creates an endpoint: 201 with the endpoint and its secret, types default to *", async () => {
    const res = await admin("POST", "/admin/webhooks/endpoints", {
      url: "https://Hooks.Example.com:443/in?src=outbox",
      scope: "tenant-a",
      description: "  billing receiver ",
    });
    expect(res.status).toBe(201);
    const { endpoint, secret } = res.body;
    expect(endpoint).toMatchObject({
      url: "https://hooks.example.com/in?src=outbox",
      types: ["*"],
      scope: "tenant-a",
      description: "billing receiver",
      enabled: true,
      disabledReason: null,
      previousSecretExpiresAt: null,
    });
    expect(endpoint.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Date(endpoint.createdAt).getTime()).not.toBeNaN();
    expect(res.headers.get("location")).toBe(`/admin/webhooks/endpoints/${endpoint.id}`);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(atob(secret.slice("whsec_".length)).length).toBeGreaterThanOrEqual(24);
  });

  it("validates every field and names it", async () => {
    const cases: [unknown, string[], RegExp?][] = [
      [{ url: "https://example.com" }, ["scope"], /required/],
      [{ scope: null }, ["url"], /required/],
      [{ url: "https://example.com", scope: "" }, ["scope"], /not be empty/],
      [{ url: "https://example.com", scope: null, types: [] }, ["types"], /at least one/],
      [{ url: "https://example.com", scope: null, types: ["supplier.*", "bad glob!"] }, ["types.1"], /glob/],
      // Event types are lower case: this was taken (201) and matched nothing.
      [
        { url: "https://example.com", scope: null, types: ["Order.Placed"] },
        ["types.0"],
        /^"Order\.Placed" must be an event-type glob: lower-case/,
      ],
      [{ url: "https://example.com", scope: null, types: "supplier.*" }, ["types"]],
      [{ url: "https://example.com", scope: null, description: "x".repeat(501) }, ["description"], /500/],
      [{ url: "https://example.com", scope: null, secret: "whsec_mine" }, ["secret"], /not a known field/],
      [{ url: 42, scope: null }, ["url"]],
    ];
    for (const [body, paths, message] of cases) {
      const res = await admin("POST", "/admin/webhooks/endpoints", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(issuePaths(res), JSON.stringify(body)).toEqual(paths);
      if (message) expect(res.body.error.issues[0].message).toMatch(message);
    }
    const notJson = await admin("POST", "/admin/webhooks/endpoints", "{not json");
    expect(notJson.status).toBe(400);
  });

  it("recover says a missing since is required, and a malformed one is not an ISO 8601 time", async () => {
    const required = "is required: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z";
    const malformed = "must be an ISO 8601 time with its offset, e.g. 2026-01-31T12:00:00Z";
    const cases: [unknown, string][] = [
      [{}, required],
      [{ since: null }, malformed],
      [{ since: "" }, malformed],
      [{ since: "yesterday" }, malformed],
      [{ since: 1_764_892_800_000 }, malformed],
      [{ since: "2026-12-05T00:00:00" }, malformed],
    ];
    for (const [body, message] of cases) {
      const res = await admin("POST", `/admin/webhooks/endpoints/${missing}/recover`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.issues, JSON.stringify(body)).toEqual([{ path: "since", message }]);
      expect(res.body.error.message, JSON.stringify(body)).toBe(`invalid body: since: ${message}`);
    }
    // A well-formed time gets past validation: this endpoint does not exist.
    const unknown = await admin("POST", `/admin/webhooks/endpoints/${missing}/recover`, {
      since: "2026-12-05T00:00:00Z",
    });
    expect(unknown.status).toBe(404);
  });

  it("recover with nothing to re-send is 200, not 202: no job was queued", async () => {
    const { endpoint } = await create({ url: "https://nothing-failed.example.com/", scope: null });
    const res = await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/recover`, {
      since: "2026-01-01T00:00:00Z",
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ recovered: 0, retrying: 0, more: false });
  });

  it("lists endpoints newest first, by scope (empty: the unscoped ones), a keyset page at a time", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await create({ url: `https://list-${i}.example.com/`, scope: "list-scope" })).endpoint.id);
    }
    const unscoped = (await create({ url: "https://list-none.example.com/", scope: null })).endpoint.id;

    const all = await admin("GET", "/admin/webhooks/endpoints?scope=list-scope");
    expect(all.status).toBe(200);
    expect(all.body.endpoints.map((e: { id: string }) => e.id)).toEqual([...ids].reverse());
    expect(all.body.nextCursor).toBeNull();

    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 5; page++) {
      const query: string = `?scope=list-scope&limit=2${cursor ? `&cursor=${cursor}` : ""}`;
      const res = await admin("GET", `/admin/webhooks/endpoints${query}`);
      expect(res.status).toBe(200);
      expect(res.body.endpoints.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.endpoints.map((e: { id: string }) => e.id));
      cursor = res.body.nextCursor;
      if (!cursor) break;
    }
    expect(seen).toEqual([...ids].reverse());

    const none = await admin("GET", "/admin/webhooks/endpoints?scope=");
    const noneIds = none.body.endpoints.map((e: { id: string; scope: string | null }) => e.id);
    expect(noneIds).toContain(unscoped);
    expect(none.body.endpoints.every((e: { scope: string | null }) => e.scope === null)).toBe(true);
    expect(noneIds).not.toContain(ids[0]);

    const everything = await admin("GET", "/admin/webhooks/endpoints?limit=200");
    expect(everything.body.endpoints.map((e: { id: string }) => e.id)).toEqual(
      expect.arrayContaining([...ids, unscoped]),
    );

    for (const query of ["?cursor=nonsense", "?limit=0", "?limit=201", "?colour=red"]) {
      const bad = await admin("GET", `/admin/webhooks/endpoints${query}`);
      expect(bad.status, query).toBe(400);
      expect(issuePaths(bad)[0], query).toBe(query.slice(1).split("=")[0]);
    }
  });

  it("lists the endpoints at one URL: what a create that timed out looks for before creating again", async () => {
    const first = await create({ url: "https://dup.example.com/in", scope: "tenant-url" });
    const second = await create({ url: "https://dup.example.com/in", scope: null });
    await create({ url: "https://dup.example.com/other", scope: "tenant-url" });
    const at = async (query: string) => {
      const res = await admin("GET", `/admin/webhooks/endpoints?${query}`);
      expect(res.status, query).toBe(200);
      return res.body as { endpoints: { id: string }[]; nextCursor: string | null };
    };
    // As stored: the URL parser's form, whatever spelling the script kept.
    const url = encodeURIComponent("HTTPS://Dup.Example.com/in");
    expect((await at(`url=${url}`)).endpoints.map((e) => e.id)).toEqual([
      second.endpoint.id,
      first.endpoint.id,
    ]);
    expect((await at(`url=${url}&scope=tenant-url`)).endpoints.map((e) => e.id)).toEqual([first.endpoint.id]);
    expect((await at(`url=${encodeURIComponent("https://nowhere.example.com/")}`)).endpoints).toEqual([]);
    // Paged like the rest, each page's cursor for this filter only.
    const page = await at(`url=${url}&limit=1`);
    expect(page.endpoints.map((e) => e.id)).toEqual([second.endpoint.id]);
    expect((await at(`url=${url}&limit=1&cursor=${page.nextCursor}`)).endpoints.map((e) => e.id)).toEqual([
      first.endpoint.id,
    ]);
    expect((await admin("GET", `/admin/webhooks/endpoints?cursor=${page.nextCursor}`)).status).toBe(400);
    const empty = await admin("GET", "/admin/webhooks/endpoints?url=");
    expect(empty.status).toBe(400);
    expect(empty.body.error.issues[0].path).toBe("url");
  });

  it("PATCH changes url, types, description; the scope stays as created", async () => {
    const { endpoint } = await create({
      url: "https://patch.example.com/",
      scope: "tenant-p",
      types: ["a.*"],
    });
    const path = `/admin/webhooks/endpoints/${endpoint.id}`;
    const res = await admin("PATCH", path, {
      url: "https://patched.example.com/v2",
      types: ["supplier.*", "corpus.note.created"],
      description: "moved",
    });
    expect(res.status).toBe(200);
    expect(res.body.endpoint).toMatchObject({
      id: endpoint.id,
      url: "https://patched.example.com/v2",
      types: ["supplier.*", "corpus.note.created"],
      description: "moved",
      scope: "tenant-p",
    });
    expect(new Date(res.body.endpoint.updatedAt).getTime()).toBeGreaterThan(
      new Date(endpoint.updatedAt as string).getTime() - 1,
    );

    const moveScope = await admin("PATCH", path, { scope: "tenant-q" });
    expect(moveScope.status).toBe(400);
    expect(issuePaths(moveScope)).toEqual(["scope"]);
    expect(moveScope.body.error.issues[0].message).toMatch(/^is fixed at creation/);
    const empty = await admin("PATCH", path, {});
    expect(empty.status).toBe(400);
    const badTypes = await admin("PATCH", path, { types: ["ok.*", "no spaces"] });
    expect(issuePaths(badTypes)).toEqual(["types.1"]);
    expect((await admin("GET", path)).body.endpoint).toMatchObject({
      scope: "tenant-p",
      types: ["supplier.*", "corpus.note.created"],
    });

    // A PATCH naming what the endpoint already has changes nothing, updatedAt included
    // (as a note's); one changing a value moves it.
    const same = await admin("PATCH", path, {
      url: "https://patched.example.com/v2",
      types: ["supplier.*", "corpus.note.created"],
      description: "moved",
      enabled: true,
    });
    expect(same.status).toBe(200);
    expect(same.body.endpoint.updatedAt).toBe(res.body.endpoint.updatedAt);
    const edited = await admin("PATCH", path, { description: "moved again" });
    expect(new Date(edited.body.endpoint.updatedAt).getTime()).toBeGreaterThan(
      new Date(res.body.endpoint.updatedAt).getTime(),
    );
  });

  it("PATCH with If-Match applies only over what was read: two scripts' edits no longer undo each other unseen", async () => {
    const { endpoint } = await create({ url: "https://etag.example.com/in", scope: null });
    const path = `/admin/webhooks/endpoints/${endpoint.id}`;
    const patch = (body: unknown, ifMatch: string) =>
      call(app, env, "PATCH", path, body, { headers: { ...auth.headers, "if-match": ifMatch } });
    const read = await admin("GET", path);
    const etag = read.headers.get("etag")!;
    expect(etag).toMatch(/^"[0-9a-f]{64}"$/);
    expect((await admin("GET", path)).headers.get("etag")).toBe(etag);

    // Script A saves over what it read, and is handed the new version.
    const a = await patch({ description: "from A" }, etag);
    expect(a.status).toBe(200);
    const afterA = a.headers.get("etag")!;
    expect(afterA).not.toBe(etag);
    expect((await admin("GET", path)).headers.get("etag")).toBe(afterA);
    // Script B read before A saved: refused, and A's change stands.
    const b = await patch({ description: "from B" }, etag);
    expect(b.status).toBe(412);
    expect(b.body.error.code).toBe("PRECONDITION_FAILED");
    expect(b.body.error.message).toMatch(/nothing was saved: GET it again/);
    expect((await admin("GET", path)).body.endpoint.description).toBe("from A");

    // A disable is a change too: an edit read before it would turn the endpoint back on.
    expect((await admin("PATCH", path, { enabled: false })).status).toBe(200);
    expect((await patch({ enabled: true }, afterA)).status).toBe(412);
    expect((await admin("GET", path)).body.endpoint.enabled).toBe(false);

    // A tag that is not one we hand out, or a weak one, matches nothing; `*` any endpoint.
    const now = (await admin("GET", path)).headers.get("etag")!;
    for (const tag of ['"bogus"', `W/${now}`, now.slice(1, -1)])
      expect((await patch({ description: "x" }, tag)).status, tag).toBe(412);
    expect((await patch({ description: "any" }, "*")).status).toBe(200);
    const two = await patch({ description: "y" }, `${now}, "other"`);
    expect(two.status).toBe(400);
    expect(two.body.error.issues).toEqual([{ path: "header.if-match", message: "takes one ETag" }]);
    expect((await admin("GET", path)).body.endpoint.description).toBe("any");
    // Without If-Match a PATCH applies as before; for an endpoint that is gone, 404.
    expect((await admin("PATCH", path, { description: "plain" })).status).toBe(200);
    expect((await patch({ description: "z" }, now)).status).toBe(412);
    const gone = `/admin/webhooks/endpoints/${missing}`;
    const missingPatch = await call(
      app,
      env,
      "PATCH",
      gone,
      { description: "z" },
      {
        headers: { ...auth.headers, "if-match": now },
      },
    );
    expect(missingPatch.status).toBe(404);
  });

  it("disabling records who did it; re-enabling clears the reason, when, and the failure streak", async () => {
    const { endpoint } = await create({ url: "https://toggle.example.com/", scope: null });
    const path = `/admin/webhooks/endpoints/${endpoint.id}`;
    const off = await admin("PATCH", path, { enabled: false });
    expect(off.body.endpoint).toMatchObject({ enabled: false, disabledReason: "disabled by an operator" });
    expect(off.body.endpoint.disabledAt).not.toBeNull();

    // As the delivery engine leaves it after a 410: disabled with its own reason, failing.
    await t.pool.query(
      `UPDATE webhook_endpoints SET disabled_reason = 'endpoint answered 410 Gone',
              failing_since = now() - interval '2 days' WHERE id = $1`,
      [endpoint.id],
    );
    // Disabling again keeps the first reason.
    const again = await admin("PATCH", path, { enabled: false });
    expect(again.body.endpoint.disabledReason).toBe("endpoint answered 410 Gone");

    const on = await admin("PATCH", path, { enabled: true });
    expect(on.status).toBe(200);
    expect(on.body.endpoint).toMatchObject({
      enabled: true,
      disabledReason: null,
      disabledAt: null,
      failingSince: null,
    });
    const health = (await admin("GET", path)).body.health;
    expect(health).toMatchObject({ disabledReason: null, failingSince: null });

    // Re-enabling an enabled endpoint leaves a failure streak in progress alone.
    await t.pool.query(
      `UPDATE webhook_endpoints SET failing_since = now() - interval '1 hour' WHERE id = $1`,
      [endpoint.id],
    );
    const noop = await admin("PATCH", path, { enabled: true });
    expect(noop.body.endpoint.failingSince).not.toBeNull();
  });

  it("can be created disabled, as an operator's disable, and enabled later like any other", async () => {
    const { endpoint, secret } = await create({
      url: "https://later.example.com/",
      scope: null,
      enabled: false,
    });
    expect(secret).toMatch(/^whsec_/);
    expect(endpoint).toMatchObject({ enabled: false, disabledReason: "disabled by an operator" });
    expect(endpoint.disabledAt).not.toBeNull();
    // Stored off: fan-out reads the column (test/webhooks/delivery.test.ts), so no delivery is made.
    const { rows } = await t.pool.query<{ enabled: boolean }>(
      "SELECT enabled FROM webhook_endpoints WHERE id = $1",
      [endpoint.id],
    );
    expect(rows[0]!.enabled).toBe(false);
    const on = await admin("PATCH", `/admin/webhooks/endpoints/${endpoint.id}`, { enabled: true });
    expect(on.body.endpoint).toMatchObject({ enabled: true, disabledReason: null, disabledAt: null });

    const explicit = await create({ url: "https://now.example.com/", scope: null, enabled: true });
    expect(explicit.endpoint).toMatchObject({ enabled: true, disabledReason: null, disabledAt: null });
    const bad = await admin("POST", "/admin/webhooks/endpoints", {
      url: "https://bad.example.com/",
      scope: null,
      enabled: "no",
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.issues).toEqual([{ path: "enabled", message: "must be true or false" }]);
  });

  it("DELETE removes the endpoint with its deliveries; then it is 404", async () => {
    const { endpoint } = await create({ url: "https://delete.example.com/", scope: null });
    await seedDelivery(endpoint.id, { status: "failed", attempts: [500] });
    const path = `/admin/webhooks/endpoints/${endpoint.id}`;
    const res = await admin("DELETE", path);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: endpoint.id });
    expect((await admin("GET", path)).status).toBe(404);
    expect((await admin("DELETE", path)).status).toBe(404);
    const { rows } = await t.pool.query(
      "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1",
      [endpoint.id],
    );
    expect(rows[0].n).toBe(0);
  });

  it("an unknown or malformed id is 404 on every route", async () => {
    for (const id of [missing, "not-a-uuid"]) {
      for (const [method, path, body] of [
        ["GET", `/admin/webhooks/endpoints/${id}`],
        ["PATCH", `/admin/webhooks/endpoints/${id}`, { description: "x" }],
        ["DELETE", `/admin/webhooks/endpoints/${id}`],
        ["POST", `/admin/webhooks/endpoints/${id}/rotate-secret`],
        ["GET", `/admin/webhooks/endpoints/${id}/deliveries`],
        ["GET", `/admin/webhooks/deliveries/${id}`],
      ] as [string, string, unknown?][]) {
        const res = await admin(method, path, body);
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(res.body.error.code).toBe("NOT_FOUND");
      }
    }
  });
});

describe("webhook endpoint health", () => {
  it("counts the last 24 hours of deliveries and attempts, with last success, failing since and disabled reason", async () => {
    const { endpoint } = await create({ url: "https://health.example.com/", scope: null });
    const path = `/admin/webhooks/endpoints/${endpoint.id}`;
    const empty = (await admin("GET", path)).body.health;
    expect(empty).toEqual({
      windowHours: 24,
      deliveries: { total: 0, delivered: 0, failed: 0, pending: 0 },
      attempts: { total: 0, succeeded: 0 },
      successRate: null,
      lastSuccessAt: null,
      failingSince: null,
      disabledReason: null,
      // Not behind (no open webhook.endpoint_lagging alert).
      lagging: null,
    });

    await seedDelivery(endpoint.id, { status: "delivered", attempts: [503, 200] });
    await seedDelivery(endpoint.id, { status: "delivered", attempts: [200] });
    await seedDelivery(endpoint.id, { status: "failed", attempts: [500, 500, 500] });
    await seedDelivery(endpoint.id, { status: "pending", attempts: [] });
    // Older than the window: not counted.
    await seedDelivery(endpoint.id, { status: "failed", attempts: [500], ageHours: 30 });
    await t.pool.query(
      `UPDATE webhook_endpoints SET last_success_at = now() - interval '5 minutes',
              failing_since = now() - interval '1 minute', enabled = false,
              disabled_reason = 'endpoint answered 410 Gone', disabled_at = now() WHERE id = $1`,
      [endpoint.id],
    );

    const res = await admin("GET", path);
    expect(res.status).toBe(200);
    expect(res.body.health).toMatchObject({
      deliveries: { total: 4, delivered: 2, failed: 1, pending: 1 },
      attempts: { total: 6, succeeded: 2 },
      successRate: 0.3333,
      disabledReason: "endpoint answered 410 Gone",
    });
    expect(Date.now() - new Date(res.body.health.lastSuccessAt).getTime()).toBeGreaterThan(4 * 60_000);
    expect(res.body.health.failingSince).not.toBeNull();
    expect(res.body.endpoint.enabled).toBe(false);
  });
});

describe("webhook deliveries (reads of the delivery log)", () => {
  it("lists an endpoint's deliveries newest first by status, keyset-paged across equal timestamps", async () => {
    const { endpoint } = await create({ url: "https://deliveries.example.com/", scope: null });
    const other = await create({ url: "https://other.example.com/", scope: null });
    await seedDelivery(other.endpoint.id, { status: "failed", attempts: [500] });
    // Seven deliveries, three of them sharing one created_at to the microsecond,
    // so a page boundary falls inside the tie and only the id can order it.
    const tie = new Date(Date.now() - 60_000);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const at = i >= 2 && i <= 4 ? tie : new Date(tie.getTime() + (i - 3) * 1000);
      ids.push(
        await seedDelivery(endpoint.id, { status: i % 2 === 0 ? "failed" : "delivered", attempts: [], at }),
      );
    }
    const { rows } = await t.pool.query<{ id: string }>(
      `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY created_at DESC, id DESC`,
      [endpoint.id],
    );
    const newestFirst = rows.map((r) => r.id);

    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const query: string = `?limit=2${cursor ? `&cursor=${cursor}` : ""}`;
      const res = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}/deliveries${query}`);
      expect(res.status).toBe(200);
      seen.push(...res.body.deliveries.map((d: { id: string }) => d.id));
      cursor = res.body.nextCursor;
      if (!cursor) break;
    }
    expect(seen).toEqual(newestFirst);

    // A cursor answers only the list it was made for: given to another list, or to
    // this one with another filter, it answered 200 with an empty page, which a
    // client reads as the end of the list.
    const first = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}/deliveries?limit=2`);
    const next: string = first.body.nextCursor;
    const endpointsCursor: string = (await admin("GET", "/admin/webhooks/endpoints?limit=1")).body.nextCursor;
    expect(endpointsCursor).toEqual(expect.any(String));
    const elsewhere = await create({ url: "https://other-deliveries.example.com/", scope: null });
    for (const path of [
      `/admin/webhooks/endpoints/${endpoint.id}/deliveries?status=failed&cursor=${next}`,
      `/admin/webhooks/endpoints/${elsewhere.endpoint.id}/deliveries?cursor=${next}`,
      `/admin/webhooks/endpoints/${endpoint.id}/deliveries?cursor=${endpointsCursor}`,
      `/admin/webhooks/endpoints?cursor=${next}`,
    ]) {
      const refused = await admin("GET", path);
      expect(refused.status, path).toBe(400);
      expect(refused.body.error.message).toBe(
        "cursor: belongs to another list, or to this one with other filters: ask again without it, from the first page",
      );
      // Named as every other refused field is, for a script that reads `issues`.
      expect(refused.body.error.issues, path).toEqual([
        {
          path: "cursor",
          message:
            "belongs to another list, or to this one with other filters: ask again without it, from the first page",
        },
      ]);
    }
    // The same list with its id in capitals is the same list.
    const upper = await admin(
      "GET",
      `/admin/webhooks/endpoints/${endpoint.id.toUpperCase()}/deliveries?limit=2&cursor=${next}`,
    );
    expect(upper.body.deliveries.map((d: { id: string }) => d.id)).toEqual(newestFirst.slice(2, 4));
    // A cursor from before lists were tagged (created_at|id) is still taken.
    const [, at, id] = atob(next.replace(/-/g, "+").replace(/_/g, "/")).split("|");
    const untagged = btoa(`${at}|${id}`).replace(/=+$/, "");
    const old = await admin(
      "GET",
      `/admin/webhooks/endpoints/${endpoint.id}/deliveries?limit=2&cursor=${untagged}`,
    );
    expect(old.body.deliveries.map((d: { id: string }) => d.id)).toEqual(newestFirst.slice(2, 4));

    const failed = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}/deliveries?status=failed`);
    expect(failed.body.deliveries.map((d: { id: string }) => d.id)).toEqual(
      newestFirst.filter((id) => ids.indexOf(id) % 2 === 0),
    );
    expect(failed.body.deliveries.every((d: { status: string }) => d.status === "failed")).toBe(true);
    const bad = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}/deliveries?status=lost`);
    expect(bad.status).toBe(400);
    expect(issuePaths(bad)).toEqual(["status"]);
  });

  it("shows one delivery with its body and every attempt, oldest first", async () => {
    const { endpoint } = await create({ url: "https://one-delivery.example.com/", scope: null });
    const id = await seedDelivery(endpoint.id, { status: "delivered", attempts: [503, null, 200] });
    const res = await admin("GET", `/admin/webhooks/deliveries/${id}`);
    expect(res.status).toBe(200);
    expect(res.body.delivery).toMatchObject({
      id,
      endpointId: endpoint.id,
      eventType: "supplier.created",
      status: "delivered",
      body: '{"type":"supplier.created"}',
    });
    expect(
      res.body.delivery.attempts.map((a: { status: number | null; error: string | null }) => [
        a.status,
        a.error,
      ]),
    ).toEqual([
      [503, null],
      [null, "timeout"],
      [200, null],
    ]);
  });
});

describe("secret rotation", () => {
  it("the previous secret keeps signing beside the new one for 24 h; both verify with standardwebhooks", async () => {
    const { endpoint, secret: first } = await create({ url: "https://rotate.example.com/", scope: null });
    const before = Date.now();
    const res = await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`);
    expect(res.status).toBe(200);
    const second: string = res.body.secret;
    expect(second).toMatch(/^whsec_/);
    expect(second).not.toBe(first);
    const expires = new Date(res.body.previousSecretExpiresAt).getTime();
    expect(expires).toBeGreaterThanOrEqual(before + 24 * 3_600_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 24 * 3_600_000);

    const key = await importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const row = await endpointRow(endpoint.id);
    const now = new Date();
    const during = await signingSecrets(key, row, now);
    expect(during).toEqual([second, first]);

    const body = JSON.stringify({ type: "webhook.test", timestamp: now.toISOString(), data: {} });
    const headers = await signHeaders({
      id: crypto.randomUUID(),
      timestamp: Math.floor(Date.now() / 1000),
      body,
      secrets: during,
    });
    expect(new Webhook(second).verify(body, headers)).toEqual(JSON.parse(body));
    expect(new Webhook(first).verify(body, headers)).toEqual(JSON.parse(body));

    // After the window only the new secret signs, and the old one no longer verifies.
    const after = await signingSecrets(key, row, new Date(expires + 1));
    expect(after).toEqual([second]);
    const later = await signHeaders({
      id: crypto.randomUUID(),
      timestamp: Math.floor(Date.now() / 1000),
      body,
      secrets: after,
    });
    expect(() => new Webhook(second).verify(body, later)).not.toThrow();
    expect(() => new Webhook(first).verify(body, later)).toThrow();

    // The GET shows the window, never the secrets.
    const got = await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}`);
    expect(new Date(got.body.endpoint.previousSecretExpiresAt).getTime()).toBe(expires);
  });

  it("a second rotation drops the oldest secret: only the two newest sign", async () => {
    const { endpoint, secret: first } = await create({
      url: "https://rotate-twice.example.com/",
      scope: null,
    });
    const second = (await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`)).body
      .secret;
    const third = (await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`)).body.secret;
    const key = await importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const secrets = await signingSecrets(key, await endpointRow(endpoint.id), new Date());
    expect(secrets).toEqual([third, second]);
    expect(secrets).not.toContain(first);
  });

  it("two rotations at once: both new secrets end up signing, neither is lost to the other", async () => {
    const { endpoint, secret: first } = await create({
      url: "https://rotate-race.example.com/",
      scope: null,
    });
    const path = `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`;
    const [a, b] = await Promise.all([admin("POST", path), admin("POST", path)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const key = await importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const secrets = await signingSecrets(key, await endpointRow(endpoint.id), new Date());
    // One UPDATE moves current → previous, so the later rotation keeps the earlier one's secret.
    expect([...secrets].sort()).toEqual([a.body.secret, b.body.secret].sort());
    expect(secrets).not.toContain(first);
  });

  it("WEBHOOK_SECRET_ROTATION_HOURS sets the window; 0 retires the old secret at once", async () => {
    const key = await importSecretsKey(TEST_WEBHOOK_SECRETS_KEY);
    const { endpoint } = await create({ url: "https://rotate-window.example.com/", scope: null });
    const before = Date.now();
    const oneHour = await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`, undefined, {
      WEBHOOK_SECRET_ROTATION_HOURS: "1",
    });
    const expires = new Date(oneHour.body.previousSecretExpiresAt).getTime();
    expect(expires - before).toBeGreaterThanOrEqual(3_600_000);
    expect(expires - before).toBeLessThan(3_600_000 + 60_000);

    const now = await admin("POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`, undefined, {
      WEBHOOK_SECRET_ROTATION_HOURS: "0",
    });
    expect(now.body.previousSecretExpiresAt).toBeNull();
    expect(await signingSecrets(key, await endpointRow(endpoint.id), new Date())).toEqual([now.body.secret]);
  });
});

describe("webhook bindings", () => {
  it("without WEBHOOK_SECRETS_KEY, creating or rotating is a 500 naming it; reads and the rest of the Worker still work", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const { endpoint } = await create({ url: "https://no-key.example.com/", scope: null });
    const noKey = { WEBHOOK_SECRETS_KEY: undefined };
    for (const [method, path, body] of [
      ["POST", "/admin/webhooks/endpoints", { url: "https://x.example.com/", scope: null }],
      ["POST", `/admin/webhooks/endpoints/${endpoint.id}/rotate-secret`],
    ] as [string, string, unknown?][]) {
      const res = await admin(method, path, body, noKey);
      expect(res.status).toBe(500);
      expect(res.body.error.code).toBe("MISCONFIGURED");
      expect(res.body.error.message).toContain("binding WEBHOOK_SECRETS_KEY is missing");
    }
    // The operator hears it in the log too, once: a webhook job's 500 showed only in QStash's console.
    const told = logged.mock.calls.filter((args) =>
      String(args[0]).includes("WEBHOOK_SECRETS_KEY is missing"),
    );
    expect(told).toHaveLength(1);
    expect((await admin("GET", `/admin/webhooks/endpoints/${endpoint.id}`, undefined, noKey)).status).toBe(
      200,
    );
    expect((await call(app, { ...env, ...noKey }, "GET", "/healthz")).status).toBe(200);
  });

  it("a malformed WEBHOOK_SECRETS_KEY, private-URL switch or rotation window is a 500 naming it", async () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const res = await admin("GET", "/admin/webhooks/endpoints", undefined, {
      WEBHOOK_SECRETS_KEY: btoa("sixteen bytes!!!"),
      WEBHOOK_ALLOW_PRIVATE_URLS: "yes",
      WEBHOOK_SECRET_ROTATION_HOURS: "1.5",
    });
    expect(res.status).toBe(500);
    expect(res.body.error.message).toBe(
      "Worker misconfigured: binding WEBHOOK_SECRETS_KEY must be base64 of 32 bytes (e.g. `openssl rand -base64 32`); " +
        'binding WEBHOOK_ALLOW_PRIVATE_URLS must be "true" or "false"; ' +
        "binding WEBHOOK_SECRET_ROTATION_HOURS must be a whole number of hours",
    );
  });
});

let seq = 0;

/** A delivery as the webhook.deliver handler leaves it, with one attempt row per status (null: no answer). */
async function seedDelivery(
  endpointId: string,
  opts: {
    status: "pending" | "delivered" | "failed";
    attempts: (number | null)[];
    ageHours?: number;
    at?: Date;
  },
): Promise<string> {
  const at = opts.at ?? new Date(Date.now() - (opts.ageHours ?? 0) * 3_600_000 - ++seq);
  const { rows } = await t.pool.query<{ id: string }>(
    `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, body, status, attempts, created_at)
     VALUES ($1, gen_random_uuid(), 'supplier.created', '{"type":"supplier.created"}', $2, $3, $4) RETURNING id`,
    [endpointId, opts.status, opts.attempts.length, at],
  );
  const id = rows[0]!.id;
  for (const [i, status] of opts.attempts.entries()) {
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, attempted_at, duration_ms, status, error)
       VALUES ($1, $2, 12, $3, $4)`,
      [id, new Date(at.getTime() + i), status, status === null ? "timeout" : null],
    );
  }
  return id;
}
