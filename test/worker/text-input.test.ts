import { randomUUID } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { createJobHandlers } from "../../src/domain/job-handlers.ts";
import type { Mail, Mailer } from "../../src/domain/mail/mailer.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { appOverTestDatabase, bindings, call, executionContext } from "../support/worker.ts";

// The app over node-postgres: these answers are decided before any SQL runs, and
// when a check is missing, Postgres' own refusal of NUL is what the test sees.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
let key: string;
beforeAll(async () => {
  env = bindings({ DATABASE_URL: t.url });
  key = await newApiKey(t.db);
});

const NUL = "a\u0000b";

describe("a body that is not JSON is an invalid body, as any other", () => {
  const cases: [string, string, string][] = [
    ["malformed", "{not json", "must be valid JSON"],
    ["cut short", '{"title":', "must be valid JSON"],
    ["trailing text", '{"title":"t"}}', "must be valid JSON"],
    ["empty", "", "must not be empty: send a JSON object"],
  ];
  it.each(cases)("%s", async (_what, text, message) => {
    const res = await app.request(
      "/notes",
      {
        method: "POST",
        body: text,
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      },
      env,
      executionContext().ctx,
    );
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; message: string; issues: unknown } };
    // Hono's own words were "Malformed JSON in request body", with no issues.
    expect(error).toMatchObject({ code: "BAD_REQUEST", message: `invalid body: ${message}` });
    expect(error.issues).toEqual([{ path: "", message }]);
  });
});

describe("a scope in a body is a string or null, and every route says both", () => {
  const admin = () => ({ headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } });
  const routes: [string, string, Record<string, unknown>, "tenant" | "admin"][] = [
    ["note", "/notes", { title: "t" }, "tenant"],
    ["supplier", "/suppliers", { name: "n" }, "tenant"],
    ["API key", "/admin/api-keys", { name: "n" }, "admin"],
    ["webhook endpoint", "/admin/webhooks/endpoints", { url: "https://hooks.example.com/in" }, "admin"],
  ];
  const post = (path: string, body: unknown, auth: "tenant" | "admin") =>
    call(app, env, "POST", path, body, auth === "admin" ? admin() : withKey(key));

  it.each(routes)("%s: a number, an object, an array", async (_what, path, valid, auth) => {
    for (const scope of [5, false, { name: "acme" }, ["acme"]]) {
      const res = await post(path, { ...valid, scope }, auth);
      expect(res.status).toBe(400);
      // "must be a string" read as if null were refused too, and it is how a body says "none".
      expect(res.body.error.issues).toEqual([
        { path: "scope", message: "must be a string or null (no scope)" },
      ]);
    }
  });

  it.each(routes)("%s: too long and empty keep their own words", async (_what, path, valid, auth) => {
    const long = await post(path, { ...valid, scope: "s".repeat(129) }, auth);
    expect(long.body.error.issues).toEqual([{ path: "scope", message: "must be at most 128 characters" }]);
    const empty = await post(path, { ...valid, scope: " " }, auth);
    expect(empty.body.error.issues).toEqual([{ path: "scope", message: "must not be empty" }]);
  });

  it("a required scope that is missing is said to be required", async () => {
    for (const [path, valid] of [
      ["/admin/api-keys", { name: "n" }],
      ["/admin/webhooks/endpoints", { url: "https://hooks.example.com/in" }],
    ] as const) {
      const res = await post(path, valid, "admin");
      // With what to send for none: null is how a body says it, which "is required" did not say.
      expect(res.body.error.issues).toEqual([
        { path: "scope", message: "is required: a scope, or null for none" },
      ]);
    }
  });
});

describe("NUL bytes are a 400 naming the field, wherever a string enters", () => {
  const cases: [string, string, string, unknown, string][] = [
    ["note title", "POST", "/notes", { title: NUL }, "title"],
    ["note body", "POST", "/notes", { title: "t", body: NUL }, "body"],
    ["note tag", "POST", "/notes", { title: "t", tags: ["ok", NUL] }, "tags.1"],
    ["note scope", "POST", "/notes", { title: "t", scope: NUL }, "scope"],
    [
      "import",
      "POST",
      "/notes/import",
      { notes: [{ title: "ok" }, { title: "t", body: NUL }] },
      "notes.1.body",
    ],
    ["supplier name", "POST", "/suppliers", { name: NUL }, "name"],
    ["an unknown key", "POST", "/suppliers", { name: "n", [NUL]: 1 }, NUL],
    ["search q", "GET", `/notes/search?q=${encodeURIComponent(NUL)}`, undefined, "q"],
    ["search scope", "GET", `/notes/search?q=x&scope=${encodeURIComponent(NUL)}`, undefined, "scope"],
  ];
  it.each(cases)("%s", async (_what, method, path, body, field) => {
    const res = await call(app, env, method, path, body, withKey(key));
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("BAD_REQUEST");
    expect(res.body.error.issues).toContainEqual({ path: field, message: expect.stringContaining("NUL") });
  });

  it("admin filters", async () => {
    const auth = { headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } };
    const res = await call(app, env, "GET", `/admin/events?type=${encodeURIComponent(NUL)}`, undefined, auth);
    expect(res.status).toBe(400);
    expect(res.body.error.issues).toContainEqual({ path: "type", message: expect.stringContaining("NUL") });
    for (const field of ["subject", "scope"]) {
      const bad = await call(
        app,
        env,
        "GET",
        `/admin/events?${field}=${encodeURIComponent(NUL)}`,
        undefined,
        auth,
      );
      expect(bad.status, field).toBe(400);
      expect(bad.body.error.issues, field).toContainEqual({
        path: field,
        message: expect.stringContaining("NUL"),
      });
    }
  });

  it("admin events: subject and scope find exactly those events, newest first", async () => {
    const auth = { headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } };
    const subject = `subject-${randomUUID()}`;
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO events (type, subject, scope, payload)
       VALUES ('supplier.connected', $1, 'acme', '{}'), ('supplier.connected', $1, 'globex', '{}'),
              ('supplier.connected', $1, 'acme', '{}'), ('supplier.connected', 'another', 'acme', '{}')
       RETURNING id`,
      [subject],
    );
    const q = `/admin/events?subject=${encodeURIComponent(subject)}&scope=acme`;
    const res = await call(app, env, "GET", q, undefined, auth);
    expect(res.status).toBe(200);
    expect(res.body.events.map((e: { id: string }) => e.id)).toEqual([rows[2]!.id, rows[0]!.id]);
  });

  it("nothing was written", async () => {
    const { rows } = await t.pool.query(
      "SELECT (SELECT count(*) FROM corpus_notes)::int AS notes, (SELECT count(*) FROM suppliers)::int AS suppliers",
    );
    expect(rows[0]).toEqual({ notes: 0, suppliers: 0 });
  });
});

describe("control characters in one-line fields are a 400; a mail subject never carries a line break", () => {
  const cases: [string, string, string, unknown, string][] = [
    ["CR/LF in a supplier name", "POST", "/suppliers", { name: "Acme\r\nBcc: victim@example.com" }, "name"],
    ["a trailing LF in a supplier name", "POST", "/suppliers", { name: "Acme\n" }, "name"],
    ["a tab in a supplier scope", "POST", "/suppliers", { name: "n", scope: "a\tb" }, "scope"],
    ["ESC in a note title", "POST", "/notes", { title: "a\u001b[31mb" }, "title"],
    ["DEL in a tag", "POST", "/notes", { title: "t", tags: ["a\u007f"] }, "tags.0"],
    ["a line separator in a scope", "POST", "/notes", { title: "t", scope: "a\u2028b" }, "scope"],
    ["BEL in a note body", "POST", "/notes", { title: "t", body: "ding\u0007" }, "body"],
    ["LF in a search", "GET", "/notes/search?q=a%0Ab", undefined, "q"],
  ];
  it.each(cases)("%s", async (_what, method, path, body, field) => {
    const res = await call(app, env, method, path, body, withKey(key));
    expect(res.status).toBe(400);
    expect(res.body.error.issues).toContainEqual({ path: field, message: expect.stringMatching(/control/) });
  });

  it("a note body keeps its line breaks and tabs", async () => {
    const res = await call(
      app,
      env,
      "POST",
      "/notes",
      { title: "t", body: "line 1\r\n\tline 2" },
      withKey(key),
    );
    expect(res.status).toBe(201);
    expect(res.body.note.body).toBe("line 1\r\n\tline 2");
  });

  it("a supplier event already stored with CR/LF in its name is mailed with a one-line subject", async () => {
    const sent: Mail[] = [];
    const mailer: Mailer = {
      async send(mail) {
        sent.push(mail);
        return { providerMessageId: null };
      },
    };
    const handlers = createJobHandlers({
      db: t.db,
      mailer,
      mailTo: "ops@example.test",
      deliverQueue: { enqueue: () => Promise.reject(new Error("no QStash in this test")) },
    });
    const event = {
      id: randomUUID(),
      seq: 1,
      type: "supplier.created",
      subject: randomUUID(),
      scope: null,
      createdAt: new Date().toISOString(),
      payload: { name: "Acme\r\nBcc: victim@example.com", status: "created" },
    };
    await handlers["notify.mail"]!({ subscription: "notify.mail", event, coalesced: [] } as never, {
      messageId: "m",
      retried: 0,
    });
    expect(sent).toHaveLength(1);
    expect(sent[0]!.subject).not.toMatch(/[\r\n]/);
    expect(sent[0]!.subject).toBe("Supplier Acme  Bcc: victim@example.com: supplier.created");
  });
});

describe("text is stored as sent, or refused: never silently replaced", () => {
  // Each of these was stored with U+FFFD in place of what was sent, and answered 201.
  const raw = async (body: Uint8Array<ArrayBuffer> | string, type = "application/json", auth = true) => {
    const { ctx, settled } = executionContext();
    const headers: Record<string, string> = { "content-type": type };
    if (auth) headers.authorization = `Bearer ${key}`;
    const res = await app.request("http://worker.test/notes", { method: "POST", headers, body }, env, ctx);
    const answer = {
      status: res.status,
      body: (await res.json()) as { error?: { code: string; message: string; issues?: unknown[] } },
    };
    await settled();
    return answer;
  };
  const titled = async (title: string) =>
    (await t.pool.query("SELECT count(*)::int AS n FROM corpus_notes WHERE title LIKE $1", [title])).rows[0]
      .n;

  it.each([
    ["a title", '{"title":"bad \\ud800 x"}', "title"],
    ["a tag", '{"title":"t","tags":["ok","\\udc00"]}', "tags.1"],
    ["a body", '{"title":"t","body":"a\\ud800"}', "body"],
    ["a pair in the wrong order", '{"title":"\\ude00\\ud83d"}', "title"],
  ])("a lone surrogate in %s is a 400 naming the field", async (_what, body, field) => {
    const res = await raw(body);
    expect(res.status).toBe(400);
    expect(res.body.error!.issues).toEqual([
      { path: field, message: expect.stringContaining("well-formed Unicode") },
    ]);
  });

  it("a surrogate pair is one character, and kept", async () => {
    const res = await raw('{"title":"smile \\ud83d\\ude00"}');
    expect(res.status).toBe(201);
    expect(await titled("smile \u{1F600}")).toBe(1);
  });

  it("bytes that are not UTF-8 are a 400, after the key is checked", async () => {
    const latin1 = Uint8Array.from(
      [...'{"title":"caf'].map((ch) => ch.charCodeAt(0)).concat([0xe9, 0x22, 0x7d]),
    );
    expect((await raw(latin1, "application/json", false)).status).toBe(401);
    const res = await raw(latin1);
    expect(res.status).toBe(400);
    expect(res.body.error!.message).toMatch(/not valid UTF-8/);
    // Named as another charset, the same bytes are refused for what they are.
    const named = await raw(latin1, "application/json; charset=iso-8859-1");
    expect(named.status).toBe(415);
    expect(named.body.error!.message).toBe(
      "the body must be UTF-8 (charset=utf-8, or none), got charset=iso-8859-1",
    );
    expect(await titled("caf%")).toBe(0);
    expect((await raw('{"title":"café"}', 'application/json; charset="UTF-8"')).status).toBe(201);
    expect(await titled("café")).toBe(1);
  });
});
