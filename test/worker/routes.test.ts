import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { DrizzleQueryError } from "drizzle-orm";
import { refreshNoteIndex } from "../../src/domain/corpus-index/refresh.ts";
import { createApp } from "../../src/worker/app.ts";
import { MAX_CONNECTIONS_PER_INVOCATION, openNeonDatabase } from "../../src/worker/database.ts";
import { parseConfig, type Bindings, type Config } from "../../src/worker/env.ts";
import { databaseUnavailable, loggable } from "../../src/worker/errors.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { bindings, call } from "../support/worker.ts";

// The app runs as the Worker would: the Neon driver over WebSockets, through the
// local proxy, to this file's database.
const t = useTestDatabase();
let proxy: WsProxy;
let env: Bindings;
const pools = { opened: 0, closed: 0 };
const app = createApp({
  openDatabase: (config) => {
    const opened = openNeonDatabase(config);
    pools.opened++;
    return { db: opened.db, pool: opened.pool, close: () => opened.close().then(() => void pools.closed++) };
  },
});

let key: string;
/** A request as a tenant: every domain route takes an API key. */
const api = (method: string, path: string, body?: unknown, init?: RequestInit) =>
  call(app, env, method, path, body, withKey(key, init));

beforeAll(async () => {
  key = await newApiKey(t.db, "s1");
  proxy = await startWsProxy();
  configureNeonForWsProxy(proxy);
  env = bindings({ DATABASE_URL: t.url, NEON_WS_PROXY: proxy.address });
});
afterAll(() => proxy?.close());

const missing = "00000000-0000-4000-8000-000000000000";

describe("health", () => {
  it("answers 200 when the database answers, and ends the request's pool after the response", async () => {
    const before = { ...pools };
    const res = await api("GET", "/healthz");
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: "ok", database: { ok: true, schema: "current" } });
    expect(pools).toEqual({ opened: before.opened + 1, closed: before.closed + 1 });
  });

  it("answers 503 with the reason when the database does not", async () => {
    const closedPort = bindings({
      DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
      NEON_WS_PROXY: proxy.address,
    });
    const res = await call(app, closedPort, "GET", "/healthz");
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe("SERVICE_UNAVAILABLE");
    expect(res.body.error.message).toMatch(/^database unavailable: \S/);
  });
});

describe("a database out of reach", () => {
  it("is a 503 a client may retry, on every route that needs it, never a 500", async () => {
    const closedPort = bindings({
      DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
      NEON_WS_PROXY: proxy.address,
    });
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      for (const [method, path, body] of [
        ["POST", "/notes", { title: "t", body: "b" }],
        ["GET", `/notes/${missing}`, undefined],
        ["GET", "/notes/search?q=x", undefined],
      ] as const) {
        const res = await call(app, closedPort, method, path, body, withKey(key));
        expect(res.status, `${method} ${path}`).toBe(503);
        expect(res.headers.get("retry-after")).toBe("1");
        expect(res.body.error.code).toBe("SERVICE_UNAVAILABLE");
        expect(res.body.error.message).toMatch(
          /database is unavailable \(connection lost or refused\).*may or may not have committed/,
        );
        // Advice a client can follow: a tenant cannot list its notes to read a create back.
        expect(res.body.error.message).toMatch(
          /without one, a resent create may land twice .*send writes with a key$/,
        );
      }
      // Logged as one line each, the driver's words with the reason: a database blip
      // printed each request's error object, stack and fields, ~17 lines a request.
      expect(errors.mock.calls).toHaveLength(3);
      for (const [where, what] of errors.mock.calls) {
        expect(String(where)).toMatch(/^\[[^\]]+\] (POST|GET) \/notes/);
        expect(typeof what).toBe("string");
        expect(what).toMatch(/^database unavailable \(connection lost or refused\): \S/);
        expect(what).not.toContain("\n");
      }
    } finally {
      errors.mockRestore();
    }
  });

  const socketEvent = {
    type: "error",
    message: "Uncaught Error: Network connection lost.",
    error: new Error("Network connection lost."),
  };

  it("logs a failed query's reason and statement, never its parameters", () => {
    const failed = new DrizzleQueryError(
      'insert into "api_keys" ("key_hash") values ($1)',
      ["4f1c0ffee-hash-of-a-key"],
      Object.assign(new Error("duplicate key value violates unique constraint"), { code: "23505" }),
    );
    const logged = String(loggable(failed));
    expect(logged).toBe(
      'query failed: duplicate key value violates unique constraint (23505); the statement, its parameters withheld: insert into "api_keys" ("key_hash") values ($1)',
    );
    expect(
      String(loggable(new DrizzleQueryError("select 1", ["x"], socketEvent as unknown as Error))),
    ).toMatch(/^query failed: Network connection lost\./);
    // A statement written over several lines is logged on one.
    const multiLine = new DrizzleQueryError(
      "WITH gone AS (\n    DELETE FROM t)\n  SELECT 1",
      [],
      new Error("x"),
    );
    expect(String(loggable(multiLine))).toBe(
      "query failed: x; the statement, its parameters withheld: WITH gone AS ( DELETE FROM t) SELECT 1",
    );
  });

  it("tells an unavailable database from other failures by SQLSTATE or the driver's words, through wrappers", () => {
    const withCode = (code: string) => Object.assign(new Error("x"), { code });
    const cases: [unknown, string | undefined][] = [
      [withCode("08006"), "connection lost or refused"],
      [withCode("08001"), "connection lost or refused"],
      [withCode("57P01"), "the database is restarting"],
      [withCode("57P03"), "the database is restarting"],
      [withCode("53300"), "too many clients: no connection slot left"],
      [new Error("timeout exceeded when trying to connect"), "connection timeout"],
      [new Error("Connection terminated unexpectedly"), "connection lost or refused"],
      [new Error("Network connection lost."), "connection lost or refused"],
      [
        new Error("Client has encountered a connection error and is not queryable"),
        "connection lost or refused",
      ],
      [new Error("Failed query: select 1", { cause: withCode("57P01") }), "the database is restarting"],
      // workerd: the Neon driver's WebSocket rejects with an ErrorEvent, bare or as Drizzle's cause.
      [socketEvent, "connection lost or refused"],
      [new DrizzleQueryError("select 1", [], socketEvent as unknown as Error), "connection lost or refused"],
      [withCode("23505"), undefined],
      [withCode("22P02"), undefined],
      [withCode("57014"), undefined],
      [new Error("secret internals"), undefined],
      ["not an error", undefined],
    ];
    for (const [error, unavailable] of cases)
      expect(databaseUnavailable(error), String(error)).toBe(unavailable);
  });
});

describe("connections", () => {
  it("a request's pool holds at most MAX_CONNECTIONS_PER_INVOCATION connections, however many queries run at once", async () => {
    const opened = openNeonDatabase(parseConfigOrThrow(env));
    let peak = 0;
    let done = false;
    const watch = (async () => {
      while (!done) {
        const { rows } = await t.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(0.3)%' AND pid <> pg_backend_pid()`,
        );
        peak = Math.max(peak, rows[0].n);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      await Promise.all(Array.from({ length: 8 }, () => opened.pool.query("SELECT pg_sleep(0.3)")));
    } finally {
      done = true;
      await watch;
      await opened.close();
    }
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(MAX_CONNECTIONS_PER_INVOCATION);
  });
});

describe("notes routes", () => {
  it("create, get, update, delete: every write answers with the events it committed", async () => {
    const created = await api("POST", "/notes", { title: "Route note", tags: ["r"], scope: "s1" });
    expect(created.status).toBe(201);
    const id: string = created.body.note.id;
    expect(created.body.note).toMatchObject({ title: "Route note", body: "", tags: ["r"], scope: "s1" });

    const got = await api("GET", `/notes/${id}`);
    expect(got.status).toBe(200);
    expect(got.body.note).toMatchObject({ id, title: "Route note" });

    const patched = await api("PATCH", `/notes/${id}`, { body: "more" });
    expect(patched.status).toBe(200);
    expect(patched.body.note.body).toBe("more");
    const unchanged = await api("PATCH", `/notes/${id}`, { body: "more" });
    expect(unchanged.body.events).toEqual([]);

    const deleted = await api("DELETE", `/notes/${id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.deleted).toBe(id);

    const recorded = await eventsAbout(t.pool, id);
    expect(recorded.map((e) => e.type)).toEqual([
      "corpus.note.created",
      "corpus.note.changed",
      "corpus.note.deleted",
    ]);
    expect([created, patched, deleted].map((r) => r.body.events)).toEqual(
      recorded.map((e) => [{ id: e.id }]),
    );

    const gone = await api("GET", `/notes/${id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.error).toMatchObject({ code: "NOT_FOUND", message: `note ${id} not found` });
  });

  it("a note's id in capitals is the same note, and its writes answer with their events", async () => {
    // The events were found by comparing their subject, as text, with the id as
    // written: in capitals a change answered "events": [] (no receipt, no relay kick)
    // and a delete echoed the capitals.
    const created = await api("POST", "/notes", { title: "Cased note", scope: "s1" });
    const id: string = created.body.note.id;
    const upper = id.toUpperCase();
    const patched = await api("PATCH", `/notes/${upper}`, { body: "more" });
    expect(patched.status).toBe(200);
    expect(patched.body.note.id).toBe(id);
    const deleted = await api("DELETE", `/notes/${upper}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body.deleted).toBe(id);
    const recorded = await eventsAbout(t.pool, id);
    expect([patched, deleted].map((r) => r.body.events)).toEqual(
      recorded.slice(1).map((e) => [{ id: e.id }]),
    );
  });

  it("imports 2,000 notes in one request and answers with 2,000 event ids", async () => {
    const notes = Array.from({ length: 2_000 }, (_, i) => ({ title: `route bulk ${i}` }));
    const res = await api("POST", "/notes/import", { notes });
    expect(res.status).toBe(201);
    expect(res.body.ids).toHaveLength(2_000);
    expect(res.body.events).toHaveLength(2_000);
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM events WHERE id = ANY($1::uuid[])", [
      res.body.events.map((e: { id: string }) => e.id),
    ]);
    expect(rows[0].n).toBe(2_000);
  });

  it("searches what the corpus index holds", async () => {
    const created = await api("POST", "/notes", {
      title: "Lighthouse keeping",
      body: "lamps and fog",
    });
    const id: string = created.body.note.id;
    const [event] = await eventsAbout(t.pool, id);
    await refreshNoteIndex(t.db, { noteId: id, eventSeq: event!.seq });
    const res = await api("GET", "/notes/search?q=fog%20lamp");
    expect(res.status).toBe(200);
    expect(res.body.hits).toEqual([expect.objectContaining({ noteId: id, title: "Lighthouse keeping" })]);
  });
});

describe("suppliers routes", () => {
  it("create → connect → activate, each answering with its event; illegal order is 409", async () => {
    const created = await api("POST", "/suppliers", { name: "Route supplier" });
    expect(created.status).toBe(201);
    const id: string = created.body.supplier.id;

    const early = await api("POST", `/suppliers/${id}/activate`);
    expect(early.status).toBe(409);
    expect(early.body.error.code).toBe("CONFLICT");
    expect(early.body.error.message).toContain("must be connected");

    const connected = await api("POST", `/suppliers/${id}/connect`);
    const activated = await api("POST", `/suppliers/${id}/activate`);
    expect([connected.status, activated.status]).toEqual([200, 200]);
    expect(activated.body.supplier.status).toBe("active");

    const recorded = await eventsAbout(t.pool, id);
    expect(recorded.map((e) => e.type)).toEqual([
      "supplier.created",
      "supplier.connected",
      "supplier.activated",
    ]);
    expect([created, connected, activated].map((r) => r.body.events)).toEqual(
      recorded.map((e) => [{ id: e.id }]),
    );
  });

  it("unknown and malformed ids are 404", async () => {
    for (const path of [`/suppliers/${missing}/connect`, "/suppliers/not-a-uuid/connect"]) {
      const res = await api("POST", path);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("NOT_FOUND");
    }
  });
});

describe("errors: one envelope for every route", () => {
  it("bad input is a 400 naming each bad field", async () => {
    const res = await api("POST", "/notes", { title: " ", tags: ["ok", 7], colour: "red" });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("BAD_REQUEST");
    expect(res.body.error.issues.map((i: { path: string }) => i.path).sort()).toEqual([
      "colour",
      "tags.1",
      "title",
    ]);
    expect(res.body.error.message).toMatch(/title: must not be empty/);
    expect(res.body.error.requestId).toBe(res.headers.get("x-request-id"));
  });

  it("a missing required field is named as required", async () => {
    const res = await api("POST", "/suppliers", {});
    expect(res.status).toBe(400);
    expect(res.body.error.issues).toEqual([{ path: "name", message: "is required" }]);
  });

  it("a limit past its maximum says so, however many digits it has", async () => {
    for (const limit of ["101", "99999999999", "99999999999999999999999", "0000000000000000000000101"]) {
      const res = await api("GET", `/notes/search?q=x&limit=${limit}`);
      expect(res.status, limit).toBe(400);
      expect(res.body.error.issues, limit).toEqual([{ path: "limit", message: "must be at most 100" }]);
    }
    for (const [limit, message] of [
      ["0000", "must be at least 1"],
      ["1e3", "must be a whole number"],
      ["-5", "must be a whole number"],
    ]) {
      const res = await api("GET", `/notes/search?q=x&limit=${limit}`);
      expect(res.body.error.issues, limit).toEqual([{ path: "limit", message }]);
    }
    expect((await api("GET", "/notes/search?q=x&limit=007")).status).toBe(200);
  });

  it("a body that is not JSON is a 400 in the envelope", async () => {
    const res = await api("POST", "/notes", "{not json");
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: "BAD_REQUEST", requestId: expect.any(String) });
  });

  it("an empty patch, an oversized import and a search without q are 400s", async () => {
    const empty = await api("PATCH", `/notes/${missing}`, {});
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toContain("at least one of title, body, tags, scope");

    const tooMany = await api("POST", "/notes/import", {
      notes: Array.from({ length: 2_001 }, () => ({ title: "x" })),
    });
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.error.issues).toEqual([{ path: "notes", message: "at most 2000 notes" }]);

    const noQuery = await api("GET", "/notes/search");
    expect(noQuery.status).toBe(400);
    expect(noQuery.body.error.issues).toEqual([{ path: "q", message: "is required" }]);
  });

  it("unknown routes are 404 in the envelope", async () => {
    const res = await api("GET", "/no/such/route");
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: "NOT_FOUND", message: "no route for GET /no/such/route" });
  });

  it("an id of the wrong form is a 404 naming the form, not 'no route'", async () => {
    const said: [string, string, string][] = [
      ["GET", "/notes/not-a-uuid", 'no such id: "not-a-uuid" is not a UUID (GET /notes/:id)'],
      ["DELETE", "/notes/bogus", 'no such id: "bogus" is not a UUID (DELETE /notes/:id)'],
      ["POST", "/suppliers/x%20y/connect", 'no such id: "x y" is not a UUID (POST /suppliers/:id/connect)'],
      [
        "POST",
        "/admin/alerts/abc/resolve",
        'no such id: "abc" is not a whole number from 1 (POST /admin/alerts/:id/resolve)',
      ],
      // A path no route has, whatever its ids, is still no route.
      ["GET", "/notes/not-a-uuid/extra", "no route for GET /notes/not-a-uuid/extra"],
      ["PUT", "/notes/not-a-uuid", "no route for PUT /notes/not-a-uuid"],
    ];
    for (const [method, path, message] of said) {
      const res = await call(app, env, method, path, undefined, {
        headers: { authorization: path.startsWith("/admin") ? `Bearer ${env.ADMIN_TOKEN}` : `Bearer ${key}` },
      });
      expect(res.status, path).toBe(404);
      expect(res.body.error.message, path).toBe(message);
    }
  });

  it("a path a route serves, asked with another method, is a 405 naming the methods it takes", async () => {
    const asked: [string, string, string[]][] = [
      ["PUT", `/notes/${missing}`, ["GET", "HEAD", "PATCH", "DELETE"]],
      ["GET", "/notes", ["POST"]],
      ["DELETE", "/notes/search", ["GET", "HEAD"]],
      // Once "no such id: \"requeue\" is not a UUID", as if GET /admin/events/:id were meant.
      ["GET", "/admin/events/requeue", ["POST"]],
    ];
    for (const [method, path, methods] of asked) {
      const res = await call(app, env, method, path, undefined, {
        headers: { authorization: path.startsWith("/admin") ? `Bearer ${env.ADMIN_TOKEN}` : `Bearer ${key}` },
      });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.body.error.code).toBe("METHOD_NOT_ALLOWED");
      expect(res.headers.get("allow")?.split(", ").sort(), path).toEqual([...methods].sort());
      expect(res.body.error.message).toBe(
        `${method} is not allowed on ${path}; it takes ${res.headers.get("allow")!.split(", ").join(" or ")}`,
      );
    }
    // OPTIONS is answered with the list itself.
    const options = await call(app, env, "OPTIONS", "/notes", undefined, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(options.status).toBe(204);
    expect(options.headers.get("allow")).toBe("POST");
    // OPTIONS changes nothing, so the checks that concern writes leave it alone: a
    // malformed Prefer, a query, an operator's Idempotency-Key (each was a 400 for one of them).
    const asking: [string, Record<string, string>, string][] = [
      ["/notes?x=1", { authorization: `Bearer ${key}`, prefer: "wait=soon" }, "POST"],
      [
        "/admin/webhooks/endpoints",
        { authorization: `Bearer ${env.ADMIN_TOKEN}`, "idempotency-key": "k-1" },
        "GET, HEAD, POST",
      ],
    ];
    for (const [path, headers, allow] of asking) {
      const res = await call(app, env, "OPTIONS", path, undefined, { headers });
      expect(res.status, path).toBe(204);
      expect(res.headers.get("allow")?.split(", ").sort(), path).toEqual(allow.split(", ").sort());
    }
  });

  it("the job routes answer any method but POST with 405 and Allow: POST, before asking for a signature", async () => {
    for (const method of ["GET", "PUT", "DELETE"]) {
      const res = await call(app, env, method, "/jobs/corpus.index");
      expect(res.status, method).toBe(405);
      expect(res.headers.get("allow"), method).toBe("POST");
      expect(res.body.error.code).toBe("METHOD_NOT_ALLOWED");
    }
    expect((await call(app, env, "POST", "/jobs/corpus.index", "{}")).status).toBe(401);
  });

  it("an unexpected failure is a 500 that names the request id, not the internals", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const broken = createApp({
      openDatabase: () => ({
        db: new Proxy({} as never, {
          get: () => {
            throw new Error("secret internals");
          },
        }),
        pool: {
          connect: () => Promise.reject(new Error("unused")),
          query: () => Promise.reject(new Error("unused")),
        },
        close: async () => undefined,
      }),
    });
    const res = await call(broken, env, "GET", `/notes/${missing}`, undefined, withKey(key));
    const logged = errors.mock.calls.map((args) => args.map(String).join(" "));
    errors.mockRestore();
    expect(res.status).toBe(500);
    expect(res.body.error.code).toBe("INTERNAL_SERVER_ERROR");
    expect(JSON.stringify(res.body)).not.toContain("secret internals");
    // The operator finds the cause in the log under the id the caller was given.
    expect(logged).toEqual([expect.stringMatching(`${res.body.error.requestId}.*secret internals`)]);
  });
});

function parseConfigOrThrow(bindings: Bindings): Config {
  const parsed = parseConfig(bindings);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.config;
}
