import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { refreshNoteIndex } from "../../src/domain/corpus-index/refresh.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";
import { drizzle } from "drizzle-orm/node-postgres";
import { createApp } from "../../src/worker/app.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
const admin = () => ({ headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } });
const as = (key: string) => (method: string, path: string, body?: unknown) =>
  call(app, env, method, path, body, withKey(key));

beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});

describe("managing keys (operator token)", () => {
  it("creates a key shown once, stored only as its SHA-256, listed and revoked without the secret", async () => {
    const created = await call(app, env, "POST", "/admin/api-keys", { scope: "acme", name: "ci" }, admin());
    expect(created.status).toBe(201);
    const key: string = created.body.key;
    expect(key).toMatch(/^eo_[A-Za-z0-9_-]{43}$/);
    expect(created.body.apiKey).toEqual({
      id: expect.any(String),
      scope: "acme",
      name: "ci",
      prefix: key.slice(0, 12),
      createdAt: expect.any(String),
      lastUsedAt: null,
      revokedAt: null,
    });
    const { rows } = await t.pool.query("SELECT key_hash FROM api_keys WHERE id = $1", [
      created.body.apiKey.id,
    ]);
    expect(rows[0].key_hash).toBe(createHash("sha256").update(key).digest("hex"));

    const listed = await call(app, env, "GET", "/admin/api-keys", undefined, admin());
    expect(listed.status).toBe(200);
    expect(listed.body.apiKeys).toContainEqual(created.body.apiKey);
    expect(JSON.stringify(listed.body)).not.toContain(key.slice(12));
    expect(JSON.stringify(listed.body)).not.toContain(rows[0].key_hash);

    expect((await as(key)("POST", "/notes", { title: "before revoke" })).status).toBe(201);
    const used = await call(app, env, "GET", "/admin/api-keys", undefined, admin());
    expect(
      used.body.apiKeys.find((k: { id: string }) => k.id === created.body.apiKey.id).lastUsedAt,
    ).not.toBeNull();

    const revoked = await call(
      app,
      env,
      "DELETE",
      `/admin/api-keys/${created.body.apiKey.id}`,
      undefined,
      admin(),
    );
    expect(revoked.status).toBe(200);
    expect(revoked.body.apiKey.revokedAt).toEqual(expect.any(String));
    const again = await call(
      app,
      env,
      "DELETE",
      `/admin/api-keys/${created.body.apiKey.id}`,
      undefined,
      admin(),
    );
    expect(again.body.apiKey.revokedAt).toBe(revoked.body.apiKey.revokedAt);

    const refused = await as(key)("POST", "/notes", { title: "after revoke" });
    expect(refused.status).toBe(401);
    expect(refused.body.error).toMatchObject({ code: "UNAUTHORIZED", message: "unknown or revoked API key" });
  });

  it("needs the operator token: none, or a tenant key, is 401; an unknown id is 404", async () => {
    const key = await newApiKey(t.db, "acme");
    expect((await call(app, env, "POST", "/admin/api-keys", { scope: "x", name: "n" })).status).toBe(401);
    expect((await as(key)("GET", "/admin/api-keys")).status).toBe(401);
    const unknown = "00000000-0000-4000-8000-000000000000";
    expect((await call(app, env, "DELETE", `/admin/api-keys/${unknown}`, undefined, admin())).status).toBe(
      404,
    );
  });

  it("every operator challenge names its realm, as the domain routes' do", async () => {
    const challenge = async (authorization?: string) =>
      (
        await call(app, env, "GET", "/admin/stats", undefined, {
          headers: authorization ? { authorization } : {},
        })
      ).headers.get("www-authenticate");
    const realm = 'Bearer realm="edge-outbox operators"';
    expect(await challenge()).toBe(realm);
    expect(await challenge("Bearer wrong-token")).toBe(`${realm}, error="invalid_token"`);
    // Another scheme is no token at all: a plain challenge (RFC 6750 §3.1); a malformed Bearer is invalid_request.
    expect(await challenge("Token abc")).toBe(realm);
    expect(await challenge("Bearer")).toBe(`${realm}, error="invalid_request"`);
  });

  it("the key list takes no parameter: a filter it would ignore is a 400", async () => {
    await newApiKey(t.db, "listed");
    for (const query of ["limit=1", "scope=listed"]) {
      const res = await call(app, env, "GET", `/admin/api-keys?${query}`, undefined, admin());
      expect(res.status, query).toBe(400);
      expect(res.body.error.issues).toEqual([{ path: query.split("=")[0], message: "is not a known field" }]);
    }
    expect((await call(app, env, "GET", "/admin/api-keys", undefined, admin())).status).toBe(200);
  });

  it("a key's scope must be given (null for no scope) and be one plain line", async () => {
    for (const body of [
      { name: "n" },
      { scope: "a\nb", name: "n" },
      { scope: "a", name: "" },
      { scope: "a", name: "n", x: 1 },
    ]) {
      const res = await call(app, env, "POST", "/admin/api-keys", body, admin());
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    const nullScope = await call(app, env, "POST", "/admin/api-keys", { scope: null, name: "n" }, admin());
    expect(nullScope.status).toBe(201);
    expect(nullScope.body.apiKey.scope).toBeNull();
  });
});

describe("every domain route takes a key", () => {
  const id = "00000000-0000-4000-8000-000000000000";
  const routes: [string, string, unknown?][] = [
    ["POST", "/notes", { title: "t" }],
    ["POST", "/notes/import", { notes: [{ title: "t" }] }],
    ["GET", `/notes/${id}`],
    ["PATCH", `/notes/${id}`, { title: "t" }],
    ["DELETE", `/notes/${id}`],
    ["GET", "/notes/search?q=x"],
    ["POST", "/suppliers", { name: "n" }],
    ["GET", `/suppliers/${id}`],
    ["POST", `/suppliers/${id}/connect`],
    ["POST", `/suppliers/${id}/activate`],
    ["GET", `/events/${id}`],
  ];
  it.each(routes)(
    "%s %s: no key or another scheme 401, a malformed bearer 400, an unknown key 401",
    async (method, path, body) => {
      const none = await call(app, env, method, path, body);
      expect(none.status).toBe(401);
      expect(none.headers.get("www-authenticate")).toBe('Bearer realm="edge-outbox"');
      // Basic, or a key sent bare: an unsupported method, answered as no credentials (RFC 6750 §3.1).
      for (const authorization of ["Basic YTpi", `eo_${"A".repeat(43)}`]) {
        const other = await call(app, env, method, path, body, { headers: { authorization } });
        expect(other.status).toBe(401);
        expect(other.headers.get("www-authenticate")).toBe('Bearer realm="edge-outbox"');
        expect(other.body.error.message).toContain("this header's scheme is not Bearer");
      }
      const malformed = await call(app, env, method, path, body, { headers: { authorization: "Bearer " } });
      expect(malformed.status).toBe(400);
      const unknown = await as(`eo_${"A".repeat(43)}`)(method, path, body);
      expect(unknown.status).toBe(401);
      // The operator token is not a tenant key.
      expect((await call(app, env, method, path, body, admin())).status).toBe(401);
      const { rows } = await t.pool.query(
        "SELECT (SELECT count(*) FROM corpus_notes WHERE title = 't')::int AS n, (SELECT count(*) FROM suppliers WHERE name = 'n')::int AS s",
      );
      expect(rows[0]).toEqual({ n: 0, s: 0 });
    },
  );

  // What `Bearer $EO_KEY` or `Bearer $ADMIN_TOKEN` sends with the variable unset.
  it("a Bearer header with no token is a 400 that says so, on the operator routes too", async () => {
    for (const path of ["/notes/search?q=x", "/admin/stats"]) {
      const empty = await call(app, env, "GET", path, undefined, { headers: { authorization: "Bearer " } });
      expect(empty.status, path).toBe(400);
      expect(empty.body.error.code, path).toBe("BAD_REQUEST");
      expect(empty.body.error.message, path).toMatch(
        /^the Authorization header must be `Bearer <(key|token)>`, got `Bearer` with no token: is the variable holding it set\?$/,
      );
      // Two tokens: only the form is named.
      const two = await call(app, env, "GET", path, undefined, { headers: { authorization: "Bearer a b" } });
      expect(two.status, path).toBe(400);
      expect(two.body.error.message, path).toMatch(
        /^the Authorization header must be `Bearer <(key|token)>`$/,
      );
    }
  });
});

describe("a key acts only in its scope", () => {
  let a: ReturnType<typeof as>;
  let b: ReturnType<typeof as>;
  let none: ReturnType<typeof as>;
  beforeAll(async () => {
    a = as(await newApiKey(t.db, "tenant-a"));
    b = as(await newApiKey(t.db, "tenant-b"));
    none = as(await newApiKey(t.db, null));
  });

  it("writes get the key's scope; a body naming another scope is a 403 and writes nothing", async () => {
    const plain = await a("POST", "/notes", { title: "scoped by key" });
    expect(plain.status).toBe(201);
    expect(plain.body.note.scope).toBe("tenant-a");
    const same = await a("POST", "/notes", { title: "same scope", scope: "tenant-a" });
    expect(same.body.note.scope).toBe("tenant-a");
    expect((await none("POST", "/notes", { title: "no scope" })).body.note.scope).toBeNull();
    const supplier = await a("POST", "/suppliers", { name: "Scoped Ltd" });
    expect(supplier.body.supplier.scope).toBe("tenant-a");
    expect((await eventsAbout(t.pool, supplier.body.supplier.id))[0]!.scope).toBe("tenant-a");

    const before = await counts();
    const other = await a("POST", "/notes", { title: "elsewhere", scope: "tenant-b" });
    expect(other.status).toBe(403);
    expect(other.body.error).toMatchObject({
      code: "FORBIDDEN",
      issues: [{ path: "scope", message: expect.any(String) }],
    });
    expect((await none("POST", "/suppliers", { name: "x", scope: "tenant-a" })).status).toBe(403);
    const imported = await a("POST", "/notes/import", {
      notes: [{ title: "ok" }, { title: "no", scope: "tenant-b" }],
    });
    expect(imported.status).toBe(403);
    expect(imported.body.error.issues).toEqual([{ path: "notes.1.scope", message: expect.any(String) }]);
    const moved = await a("PATCH", `/notes/${plain.body.note.id}`, { scope: "tenant-b" });
    expect(moved.status).toBe(403);
    expect((await a("GET", "/notes/search?q=x&scope=tenant-b")).status).toBe(403);
    expect(await counts()).toEqual(before);

    const imports = await a("POST", "/notes/import", {
      notes: [{ title: "i1" }, { title: "i2", scope: "tenant-a" }],
    });
    expect(imports.status).toBe(201);
    const { rows } = await t.pool.query(
      "SELECT DISTINCT scope FROM corpus_notes WHERE id = ANY($1::uuid[])",
      [imports.body.ids],
    );
    expect(rows).toEqual([{ scope: "tenant-a" }]);
  });

  it("a PATCH naming only the key's own scope changes nothing; another's note or none is still 404", async () => {
    const note = (await a("POST", "/notes", { title: "stays put" })).body.note;
    const loose = (await none("POST", "/notes", { title: "unscoped" })).body.note;
    const before = await counts();
    // It was a 500: the route leaves the key's own scope out, and the use case refused the empty rest.
    const own = await a("PATCH", `/notes/${note.id}`, { scope: "tenant-a" });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(own.body).toMatchObject({
      note: { id: note.id, title: "stays put", scope: "tenant-a" },
      events: [],
    });
    const ownNull = await none("PATCH", `/notes/${loose.id}`, { scope: null });
    expect(ownNull.status).toBe(200);
    expect(ownNull.body.events).toEqual([]);
    for (const [as_, path, body] of [
      [a, `/notes/0190c4f1-0000-7000-8000-000000000000`, { scope: "tenant-a" }],
      [none, `/notes/${note.id}`, { scope: null }],
      [b, `/notes/${note.id}`, { scope: "tenant-b" }],
    ] as const) {
      const res = await as_("PATCH", path, body);
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(404);
    }
    expect(await counts()).toEqual(before);
  });

  it("another scope's ids are 404 on every route, and nothing changes", async () => {
    const note = (await a("POST", "/notes", { title: "private note" })).body;
    const supplier = (await a("POST", "/suppliers", { name: "Private Ltd" })).body;
    const before = await counts();
    for (const other of [b, none]) {
      for (const [method, path, body] of [
        ["GET", `/notes/${note.note.id}`],
        ["PATCH", `/notes/${note.note.id}`, { title: "stolen" }],
        ["DELETE", `/notes/${note.note.id}`],
        ["GET", `/suppliers/${supplier.supplier.id}`],
        ["POST", `/suppliers/${supplier.supplier.id}/connect`],
        ["POST", `/suppliers/${supplier.supplier.id}/activate`],
        ["GET", `/events/${note.events[0].id}`],
        ["GET", `/events/${supplier.events[0].id}`],
      ] as [string, string, unknown?][]) {
        const res = await other(method, path, body);
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(res.body.error.code).toBe("NOT_FOUND");
      }
    }
    expect(await counts()).toEqual(before);
    // The owner still reaches all of it.
    expect((await a("GET", `/notes/${note.note.id}`)).body.note.title).toBe("private note");
    expect((await a("GET", `/events/${note.events[0].id}`)).status).toBe(200);
    expect((await a("POST", `/suppliers/${supplier.supplier.id}/connect`)).status).toBe(200);
  });

  it("another scope's event and a missing one are told apart by nothing, not even the statements run", async () => {
    const note = (await a("POST", "/notes", { title: "event to hide" })).body;
    const statements: string[] = [];
    const counted = createApp({
      openDatabase: () => {
        const pool = t.newPool(2);
        const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
        (pool as unknown as { query: typeof query }).query = (...args: unknown[]) => {
          const text = args[0];
          statements.push(typeof text === "string" ? text : String((text as { text?: string }).text));
          return query(...args);
        };
        return { db: drizzle({ client: pool }), pool, close: () => pool.end() };
      },
    });
    const key = await newApiKey(t.db, "tenant-b");
    const read = async (id: string) => {
      statements.length = 0;
      const res = await call(counted, env, "GET", `/events/${id}`, undefined, withKey(key));
      return { status: res.status, body: res.body, statements: [...statements] };
    };
    const hidden = await read(note.events[0].id);
    const missing = await read("0190c4f1-0000-7000-8000-000000000000");
    expect(hidden.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(hidden.body.error.message.replace(note.events[0].id, "ID")).toBe(
      missing.body.error.message.replace("0190c4f1-0000-7000-8000-000000000000", "ID"),
    );
    // And says why an id may be unknown: a receipt's poll link followed after retention.
    expect(missing.body.error.message).toBe(
      "event 0190c4f1-0000-7000-8000-000000000000 not found: not recorded in this API key's scope, " +
        "or deleted once fanned out more than 30 days ago",
    );
    // Reading the event's alerts only when it existed made the answer slower by a round trip.
    expect(hidden.statements).toEqual(missing.statements);
  });

  it("search never returns another scope's notes", async () => {
    const ids: Record<string, string> = {};
    for (const [who, name] of [
      [a, "a"],
      [b, "b"],
      [none, "none"],
    ] as const) {
      const created = await who("POST", "/notes", { title: `Zeppelin logbook ${name}` });
      ids[name] = created.body.note.id;
      const [event] = await eventsAbout(t.pool, created.body.note.id);
      await refreshNoteIndex(t.db, { noteId: created.body.note.id, eventSeq: event!.seq });
    }
    for (const [who, name] of [
      [a, "a"],
      [b, "b"],
      [none, "none"],
    ] as const) {
      const res = await who("GET", "/notes/search?q=zeppelin");
      expect(res.status).toBe(200);
      expect(res.body.hits.map((h: { noteId: string }) => h.noteId)).toEqual([ids[name]]);
    }
    // Naming its own scope is allowed and changes nothing.
    expect((await a("GET", "/notes/search?q=zeppelin&scope=tenant-a")).body.hits).toHaveLength(1);
    // `scope=` with no value names "no scope", as on every other filter: a key for
    // rows without one may say so; a scoped key is told it named another scope.
    const unscoped = await none("GET", "/notes/search?q=zeppelin&scope=");
    expect(unscoped.status).toBe(200);
    expect(unscoped.body.hits.map((h: { noteId: string }) => h.noteId)).toEqual([ids.none]);
    expect((await a("GET", "/notes/search?q=zeppelin&scope=")).status).toBe(403);
  });
});

async function counts() {
  const { rows } = await t.pool.query(
    `SELECT (SELECT count(*) FROM corpus_notes)::int AS notes, (SELECT count(*) FROM suppliers)::int AS suppliers,
            (SELECT count(*) FROM events)::int AS events,
            (SELECT count(*) FROM suppliers WHERE status <> 'created')::int AS moved,
            (SELECT string_agg(title, ',' ORDER BY id) FROM corpus_notes) AS titles`,
  );
  return rows[0];
}
