import { beforeAll, describe, expect, it } from "vitest";
import { deleteExpiredKeys, IDEMPOTENCY_KEY_HOURS } from "../../src/domain/idempotency.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { parseIdempotencyKey } from "../../src/worker/idempotency.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout } from "../support/helpers.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// Idempotency-Key on the tenant writes (ADR 0035), through the app over real
// Postgres, each request on a pool of its own as on Workers: a resent write
// lands once and is answered as the first was.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
let key: string;

beforeAll(async () => {
  env = bindings({ DATABASE_URL: t.url });
  key = await newApiKey(t.db, "acme");
});

const send = (
  method: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
  apiKey: string = key,
) => call(app, env, method, path, body, withKey(apiKey, { headers }));

let n = 0;
/** A key of its own for each test, as a client makes one per request. */
const fresh = () => `test-${process.pid}-${++n}-${crypto.randomUUID()}`;

async function notesTitled(title: string): Promise<string[]> {
  const { rows } = await t.pool.query("SELECT id FROM corpus_notes WHERE title = $1", [title]);
  return rows.map((r) => r.id as string);
}

describe("Idempotency-Key on a create", () => {
  it("a resent create writes one note and one event, and is answered as the first was", async () => {
    const idem = fresh();
    const first = await send(
      "POST",
      "/notes",
      { title: "sent twice", tags: ["a"] },
      { "Idempotency-Key": idem },
    );
    expect(first.status).toBe(201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await send(
      "POST",
      "/notes",
      { title: "sent twice", tags: ["a"] },
      { "Idempotency-Key": idem },
    );
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("location")).toBe(first.headers.get("location"));
    expect(again.body).toEqual(first.body);

    const ids = await notesTitled("sent twice");
    expect(ids).toEqual([first.body.note.id]);
    const events = await eventsAbout(t.pool, ids[0]!);
    expect(events.map((e) => e.id)).toEqual(first.body.events.map((e: { id: string }) => e.id));
  });

  it("without a key, a resent create writes twice (what the key is for)", async () => {
    await send("POST", "/notes", { title: "no key" }, {});
    await send("POST", "/notes", { title: "no key" }, {});
    expect(await notesTitled("no key")).toHaveLength(2);
  });

  it("the same body spaced or ordered differently is the same request", async () => {
    const idem = fresh();
    const first = await send("POST", "/notes", '{"title":"spaced","body":"b"}', { "Idempotency-Key": idem });
    const again = await send("POST", "/notes", '{ "body": "b",\n  "title": "spaced" }', {
      "Idempotency-Key": idem,
    });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await notesTitled("spaced")).toHaveLength(1);
  });

  it("naming the key's own scope, or leaving it out, is the same request", async () => {
    const idem = fresh();
    const first = await send("POST", "/notes", { title: "own scope" }, { "Idempotency-Key": idem });
    const again = await send(
      "POST",
      "/notes",
      { title: "own scope", scope: "acme" },
      { "Idempotency-Key": idem },
    );
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await notesTitled("own scope")).toHaveLength(1);
  });

  it("a change naming the key's own scope, or leaving it out, is the same request", async () => {
    const created = await send("POST", "/notes", { title: "patched once", body: "b" }, {});
    const id: string = created.body.note.id;
    const idem = fresh();
    const first = await send("PATCH", `/notes/${id}`, { tags: ["x", "y"] }, { "Idempotency-Key": idem });
    expect(first.status).toBe(200);
    const again = await send(
      "PATCH",
      `/notes/${id}`,
      { tags: ["x", "y"], scope: "acme" },
      { "Idempotency-Key": idem },
    );
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await eventsAbout(t.pool, id)).toHaveLength(2);
  });

  it("the key with another body, or on another route, is a 422 and writes nothing", async () => {
    const idem = fresh();
    const first = await send("POST", "/notes", { title: "original" }, { "Idempotency-Key": idem });
    expect(first.status).toBe(201);
    const other = await send("POST", "/notes", { title: "changed" }, { "Idempotency-Key": idem });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe("UNPROCESSABLE_CONTENT");
    expect(other.body.error.message).toContain(`Idempotency-Key "${idem}" was used at `);
    expect(other.body.error.message).toContain("for another request");
    expect(await notesTitled("changed")).toEqual([]);

    const elsewhere = await send("POST", "/suppliers", { name: "original" }, { "Idempotency-Key": idem });
    expect(elsewhere.status).toBe(422);
    const { rows } = await t.pool.query("SELECT 1 FROM suppliers WHERE name = 'original'");
    expect(rows).toEqual([]);
  });

  it("keys are per API key: another tenant key's same key is a request of its own", async () => {
    const other = await newApiKey(t.db, "acme", "second key");
    const idem = fresh();
    const a = await send("POST", "/notes", { title: "two keys" }, { "Idempotency-Key": idem });
    const b = await send("POST", "/notes", { title: "two keys" }, { "Idempotency-Key": idem }, other);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.headers.get("idempotent-replayed")).toBeNull();
    expect(await notesTitled("two keys")).toHaveLength(2);
  });

  it("takes the draft's quoted form: the same key bare and quoted is one key", async () => {
    const idem = fresh();
    await send("POST", "/notes", { title: "quoted" }, { "Idempotency-Key": idem });
    const again = await send("POST", "/notes", { title: "quoted" }, { "Idempotency-Key": `"${idem}"` });
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await notesTitled("quoted")).toHaveLength(1);
  });

  it("an import resent is one import", async () => {
    const idem = fresh();
    const notes = [{ title: "imported once" }, { title: "imported once" }];
    const first = await send("POST", "/notes/import", { notes }, { "Idempotency-Key": idem });
    const again = await send("POST", "/notes/import", { notes }, { "Idempotency-Key": idem });
    expect(first.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect((await notesTitled("imported once")).sort()).toEqual([...first.body.ids].sort());
  });
});

describe("Idempotency-Key under concurrency", () => {
  it("8 copies of one request at once, each on its own connection: one note, every answer the same", async () => {
    const idem = fresh();
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        send("POST", "/notes", { title: "raced" }, { "Idempotency-Key": idem }),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(201));
    const ids = await notesTitled("raced");
    expect(ids).toHaveLength(1);
    for (const a of answers) expect(a.body).toEqual(answers[0]!.body);
    expect(answers.filter((a) => a.headers.get("idempotent-replayed") === null)).toHaveLength(1);
    expect(await eventsAbout(t.pool, ids[0]!)).toHaveLength(1);
  });

  it("a repeat waits for the first's transaction: rolled back, the repeat becomes the write", async () => {
    const idem = fresh();
    const { rows: keyRows } = await t.pool.query(
      "SELECT k.id FROM api_keys k WHERE k.scope = 'acme' ORDER BY created_at LIMIT 1",
    );
    const apiKeyId: string = keyRows[0].id;
    // A first request's claim held open in a transaction of its own, as a write in progress.
    const first = await t.pool.connect();
    try {
      await first.query("BEGIN");
      await first.query(
        "INSERT INTO idempotency_keys (api_key_id, key, fingerprint) VALUES ($1, $2, 'in progress')",
        [apiKeyId, idem],
      );
      let answered = false;
      const repeat = send("POST", "/notes", { title: "after a rollback" }, { "Idempotency-Key": idem }).then(
        (a) => {
          answered = true;
          return a;
        },
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(answered).toBe(false);
      await first.query("ROLLBACK");
      const a = await repeat;
      expect(a.status).toBe(201);
      expect(a.headers.get("idempotent-replayed")).toBeNull();
      expect(await notesTitled("after a rollback")).toHaveLength(1);
    } finally {
      first.release();
    }
  });
});

describe("what is remembered, and for how long", () => {
  it("a keyed create that fails in the database leaves no key: resent once it can succeed, it runs", async () => {
    // The create and its key travel in one message (writeOnceInTrips): a failing
    // statement there must take the claim with it, as a drizzle transaction would.
    await t.pool.query("ALTER TABLE corpus_notes ADD CONSTRAINT no_boom CHECK (title <> 'boom') NOT VALID");
    const idem = fresh();
    try {
      const failed = await send("POST", "/notes", { title: "boom" }, { "Idempotency-Key": idem });
      expect(failed.status).toBe(500);
      const { rows } = await t.pool.query("SELECT 1 FROM idempotency_keys WHERE key = $1", [idem]);
      expect(rows).toEqual([]);
    } finally {
      await t.pool.query("ALTER TABLE corpus_notes DROP CONSTRAINT no_boom");
    }
    const later = await send("POST", "/notes", { title: "boom" }, { "Idempotency-Key": idem });
    expect(later.status).toBe(201);
    expect(later.headers.get("idempotent-replayed")).toBeNull();
    expect(await notesTitled("boom")).toEqual([later.body.note.id]);
    const again = await send("POST", "/notes", { title: "boom" }, { "Idempotency-Key": idem });
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(later.body);
  });

  it("a refused write is not remembered: sent again once it can succeed, it runs", async () => {
    const supplier = await send("POST", "/suppliers", { name: "refused first" }, {});
    const id: string = supplier.body.supplier.id;
    const idem = fresh();
    const early = await send("POST", `/suppliers/${id}/activate`, undefined, { "Idempotency-Key": idem });
    expect(early.status).toBe(409);
    expect((await send("POST", `/suppliers/${id}/connect`, undefined, {})).status).toBe(200);
    const later = await send("POST", `/suppliers/${id}/activate`, undefined, { "Idempotency-Key": idem });
    expect(later.status).toBe(200);
    expect(later.body.supplier.status).toBe("active");
    expect(later.headers.get("idempotent-replayed")).toBeNull();
  });

  it("a transition resent with its key is answered as the first, not with a 409", async () => {
    const supplier = await send("POST", "/suppliers", { name: "connected once" }, {});
    const id: string = supplier.body.supplier.id;
    const idem = fresh();
    const first = await send("POST", `/suppliers/${id}/connect`, undefined, { "Idempotency-Key": idem });
    const again = await send("POST", `/suppliers/${id}/connect`, undefined, { "Idempotency-Key": idem });
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    const plain = await send("POST", `/suppliers/${id}/connect`, undefined, {});
    expect(plain.status).toBe(409);
  });

  it("a note's id in capitals in the path is the same request (a UUID is case-insensitive)", async () => {
    const created = await send("POST", "/notes", { title: "cased", body: "b" }, {});
    const id: string = created.body.note.id;
    const idem = fresh();
    const change = { title: "cased, changed" };
    const first = await send("PATCH", `/notes/${id.toUpperCase()}`, change, { "Idempotency-Key": idem });
    expect(first.status).toBe(200);
    const again = await send("PATCH", `/notes/${id}`, change, { "Idempotency-Key": idem });
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await eventsAbout(t.pool, id)).toHaveLength(2);
  });

  it(`a key older than ${IDEMPOTENCY_KEY_HOURS} h is free again, and the sweep deletes it`, async () => {
    const idem = fresh();
    await send("POST", "/notes", { title: "a day ago" }, { "Idempotency-Key": idem });
    await t.pool.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '${IDEMPOTENCY_KEY_HOURS} hours 1 minute' WHERE key = $1`,
      [idem],
    );
    const later = await send("POST", "/notes", { title: "a day later" }, { "Idempotency-Key": idem });
    expect(later.status).toBe(201);
    expect(later.headers.get("idempotent-replayed")).toBeNull();
    expect(await notesTitled("a day later")).toHaveLength(1);

    const old = fresh();
    await send("POST", "/notes", { title: "to be swept" }, { "Idempotency-Key": old });
    await t.pool.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '${IDEMPOTENCY_KEY_HOURS} hours 1 minute' WHERE key = $1`,
      [old],
    );
    const deleted = await deleteExpiredKeys(t.db, new Date());
    expect(deleted).toBeGreaterThanOrEqual(1);
    const { rows } = await t.pool.query("SELECT key FROM idempotency_keys WHERE key = ANY($1)", [
      [old, idem],
    ]);
    expect(rows.map((r) => r.key)).toEqual([idem]);
  });

  it("a replay asked to wait reads the receipt of the first's events", async () => {
    const idem = fresh();
    const first = await send("POST", "/notes", { title: "replayed receipt" }, { "Idempotency-Key": idem });
    const eventIds = first.body.events.map((e: { id: string }) => e.id);
    // No QStash here: the kick fails, so the wait ends in a 202 naming the first's event.
    const again = await send(
      "POST",
      "/notes",
      { title: "replayed receipt" },
      { "Idempotency-Key": idem, Prefer: "wait=1" },
    );
    expect(again.status).toBe(202);
    expect(again.headers.get("location")).toBe(`/events/${eventIds[0]}`);
    expect(again.body.events.map((e: { id: string }) => e.id)).toEqual(eventIds);
    expect(again.body.note).toEqual(first.body.note);
  });
});

describe("operator routes", () => {
  const admin = (method: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
    call(app, env, method, path, body, {
      headers: { ...headers, authorization: `Bearer ${env.ADMIN_TOKEN}` },
    });
  const count = async (table: string) =>
    Number((await t.pool.query(`SELECT count(*) FROM ${table}`)).rows[0].count);

  it("refuse a key with a 400 rather than ignore it, and create nothing", async () => {
    const keys = await count("api_keys");
    const endpoints = await count("webhook_endpoints");
    const idem = { "Idempotency-Key": fresh() };
    for (const [path, body] of [
      ["/admin/api-keys", { scope: "acme", name: "resent" }],
      ["/admin/webhooks/endpoints", { url: "https://example.com/hook", scope: null }],
    ] as const) {
      const res = await admin("POST", path, body, idem);
      expect(res.status).toBe(400);
      expect(res.body.error.message).toContain("operator routes take no Idempotency-Key");
      expect(res.body.error.issues).toEqual([
        { path: "header.idempotency-key", message: "not taken by operator routes" },
      ]);
    }
    expect(await count("api_keys")).toBe(keys);
    expect(await count("webhook_endpoints")).toBe(endpoints);
    // A read with one is answered: it changes nothing either way.
    expect((await admin("GET", "/admin/stats", undefined, idem)).status).toBe(200);
    // Without the operator token the answer is the 401, not the rule.
    const anonymous = await call(app, env, "POST", "/admin/api-keys", { scope: null }, { headers: idem });
    expect(anonymous.status).toBe(401);
  });
});

describe("a bad Idempotency-Key", () => {
  it("is a 400 naming the rule, and nothing is written", async () => {
    for (const bad of ["", "has space", '"unclosed', '"a"b', "x".repeat(256), '"bad\\escape"', "é"]) {
      const res = await send(
        "POST",
        "/notes",
        { title: `bad key ${bad.length}` },
        { "Idempotency-Key": bad },
      );
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error.message).toContain("Idempotency-Key must be 1 to 255 visible ASCII characters");
    }
    const { rows } = await t.pool.query("SELECT 1 FROM corpus_notes WHERE title LIKE 'bad key %'");
    expect(rows).toEqual([]);
  });

  it("parses bare and quoted keys", () => {
    expect(parseIdempotencyKey(undefined)).toBeUndefined();
    expect(parseIdempotencyKey("8e03978e-40d5-43e8-bc93-6894a57f9324")).toBe(
      "8e03978e-40d5-43e8-bc93-6894a57f9324",
    );
    expect(parseIdempotencyKey('"with space"')).toBe("with space");
    expect(parseIdempotencyKey('"esc\\"aped\\\\"')).toBe('esc"aped\\');
    expect(parseIdempotencyKey("x".repeat(255))).toHaveLength(255);
    // The header sent twice arrives as "a, b": said as that, not as a malformed key.
    expect(() => parseIdempotencyKey("a, b")).toThrow("Idempotency-Key was sent 2 times: send it once");
    expect(() => parseIdempotencyKey('"one key", key-2, key-3')).toThrow("was sent 3 times");
    expect(parseIdempotencyKey('"a, b"')).toBe("a, b");
    // One of them a key and one not: both faults are said.
    expect(() => parseIdempotencyKey('a, "unclosed')).toThrow(
      'Idempotency-Key was sent 2 times, not all of them keys: send one; Idempotency-Key must be 1 to 255 visible ASCII characters, bare or as a quoted string ("…"), e.g. a UUID',
    );
    expect(() => parseIdempotencyKey('"unclosed, "also')).toThrow(/^Idempotency-Key must be/);
    // The spaces and tabs around a field value are not part of it (RFC 9110 §5.5).
    expect(parseIdempotencyKey("my-key-1   ")).toBe("my-key-1");
    expect(parseIdempotencyKey('\t "quoted key" \t')).toBe("quoted key");
    expect(() => parseIdempotencyKey("   ")).toThrow("Idempotency-Key must be");
  });
});
