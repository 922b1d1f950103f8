import { beforeAll, describe, expect, it, vi } from "vitest";
import { readReceipt } from "../../src/outbox/index.ts";
import { newApiKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventsAbout, waitFor } from "../support/helpers.ts";
import { request, useWorkerd } from "../support/workerd.ts";

// The deployable bundle, run by workerd, end to end: writes commit their events,
// the kick publishes to the QStash dev server, which delivers signed jobs back to
// the Worker's /jobs routes, whose handlers update the search index. Proves the
// Worker code is edge-safe and the Neon driver reaches Postgres from the runtime.
const t = useTestDatabase();
const stack = useWorkerd(t);

let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});

/** A request as a tenant: the domain routes take an API key. */
const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  request(stack, method, path, body, { Authorization: `Bearer ${key}`, ...headers });

/** Until the proxy has seen no new round trip for 300 ms: earlier requests' background work is done. */
async function settled(): Promise<void> {
  for (let last = -1; ;) {
    const now = stack.proxy.stats().roundTrips;
    if (now === last) return;
    last = now;
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

async function indexed(noteId: string): Promise<boolean> {
  const { rows } = await t.pool.query("SELECT 1 FROM corpus_index WHERE note_id = $1", [noteId]);
  return rows.length > 0;
}

describe("the Worker in workerd", () => {
  it("answers /healthz from the database, its schema read against the migrations bundled in", async () => {
    const res = await call("GET", "/healthz");
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: "ok", database: { ok: true, schema: "current" } });
  });

  it("write → event → kick → QStash → signed job → index: the note becomes searchable", async () => {
    const res = await call("POST", "/notes", { title: "Lighthouse logbook", body: "fog horn drills" });
    expect(res.status).toBe(201);
    const noteId: string = res.body.note.id;
    const recorded = await eventsAbout(t.pool, noteId);
    expect(res.body.events).toEqual(recorded.map((e) => ({ id: e.id })));
    expect(recorded.map((e) => e.type)).toEqual(["corpus.note.created"]);

    // No Prefer: the kick runs after the response; wait for its effect, not for time.
    await waitFor(() => indexed(noteId), 10_000);
    const search = await call("GET", "/notes/search?q=fog%20horn");
    expect(search.status).toBe(200);
    expect(search.body.hits).toEqual([expect.objectContaining({ noteId, title: "Lighthouse logbook" })]);

    // Both matching subscriptions got a job, delivered and acknowledged.
    const delivered = await stack.qstash.waitFor((messages) => {
      const ours = messages.filter((m) => m.body.includes(recorded[0]!.id) && m.kind === "publish");
      return ours.length === 2 && ours.every((m) => m.state === "DELIVERED") ? ours : undefined;
    });
    expect(delivered.map((m) => new URL(m.url).pathname).sort()).toEqual([
      "/jobs/corpus.index",
      "/jobs/webhook.fanout",
    ]);

    const removed = await call("DELETE", `/notes/${noteId}`);
    expect(removed.status).toBe(200);
    await waitFor(async () => !(await indexed(noteId)), 10_000);
  });
});

describe("write receipts (Prefer: wait=N)", () => {
  it("waits for fan-out and answers with each subscription's job", async () => {
    const res = await call("POST", "/notes", { title: "Receipt note" }, { Prefer: "wait=5" });
    expect(res.status).toBe(201);
    expect(res.headers.get("preference-applied")).toBe("wait=5");
    const [event] = res.body.events;
    expect(res.body.events).toHaveLength(1);
    expect(event).toMatchObject({ type: "corpus.note.created", poisoned: false });
    expect(event.fannedOutAt).toEqual(expect.any(String));
    expect(Object.keys(event.fanout).sort()).toEqual(["corpus.index", "webhook.fanout"]);
    // The message ids are the ones QStash knows.
    for (const entry of Object.values(event.fanout) as { messageId: string }[]) {
      expect(stack.qstash.message(entry.messageId)).toBeDefined();
    }

    // The poll link shows the same fan-out, to the writer, without the operator token.
    const polled = await call("GET", `/events/${event.id}`);
    expect(polled.status).toBe(200);
    expect(polled.body.event).toMatchObject({ id: event.id, state: "fanned", fanout: event.fanout });
    expect(polled.body.event.payload).toBeUndefined();
  });

  it("answers from the kick's own pass: the receipt a read gives, for no round trip more than no wait", async () => {
    // Deliveries would use the proxy too: held back, so it counts only these writes.
    stack.qstash.pauseDelivery();
    try {
      await settled();
      const write = async (headers: Record<string, string>) => {
        const before = stack.proxy.stats().roundTrips;
        const res = await call("POST", "/notes", { title: "Counted note" }, headers);
        expect(res.status).toBe(201);
        const ids: string[] = res.body.events.map((e: { id: string }) => e.id);
        // Without a wait the kick runs after the answer: count once it marked the event.
        await waitFor(async () => (await readReceipt(t.pool, ids)).complete, 10_000);
        await settled();
        return { res, ids, roundTrips: stack.proxy.stats().roundTrips - before };
      };
      const plain = await write({});
      const waited = await write({ Prefer: "wait=5" });
      const read = await readReceipt(t.pool, waited.ids);
      expect(JSON.stringify(waited.res.body.events)).toBe(JSON.stringify(read.events));
      expect(waited.roundTrips).toBe(plain.roundTrips);
    } finally {
      stack.qstash.resumeDelivery();
    }
  });

  it("a write with its receipt is 4 database round trips: connect + key check, the create, claim, mark + commit", async () => {
    // Counted by the proxy with deliveries held, so only this write's requests are seen.
    stack.qstash.pauseDelivery();
    try {
      await settled();
      const before = stack.proxy.stats();
      const res = await call("POST", "/notes", { title: "Four trips" }, { Prefer: "wait=5" });
      expect(res.status).toBe(201);
      await settled();
      const after = stack.proxy.stats();
      expect(after.connections - before.connections).toBe(1);
      expect(after.roundTrips - before.roundTrips).toBe(4);
      const recorded = await eventsAbout(t.pool, res.body.note.id);
      expect(res.body.events.map((e: { id: string }) => e.id)).toEqual(recorded.map((e) => e.id));
      expect(res.body.events[0].fannedOutAt).toEqual(expect.any(String));
    } finally {
      stack.qstash.resumeDelivery();
    }
  });

  it("a write resent with its Idempotency-Key lands once; the repeat is answered as the first, with the receipt", async () => {
    stack.qstash.pauseDelivery();
    try {
      await settled();
      const idem = crypto.randomUUID();
      const headers = { Prefer: "wait=5", "Idempotency-Key": idem };
      const before = stack.proxy.stats();
      const first = await call("POST", "/notes", { title: "Sent twice in workerd" }, headers);
      await settled();
      const keyed = stack.proxy.stats();
      const again = await call("POST", "/notes", { title: "Sent twice in workerd" }, headers);
      await settled();
      const after = stack.proxy.stats();
      // What the key costs (ADR 0035): one trip more than the 4 above, the answer's
      // store with the COMMIT; the claim travels with the create (writeOnceInTrips).
      // 11 while the create ran through drizzle in a savepoint inside the key's
      // transaction. The repeat reads the answer and the receipt, and writes nothing.
      expect(keyed.roundTrips - before.roundTrips).toBe(5);
      expect(after.roundTrips - keyed.roundTrips).toBe(6);
      expect(first.status).toBe(201);
      expect(again.status).toBe(201);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.headers.get("location")).toBe(`/notes/${first.body.note.id}`);
      expect(again.body).toEqual(first.body);
      expect(first.body.events[0].fannedOutAt).toEqual(expect.any(String));
      const { rows } = await t.pool.query(
        "SELECT id FROM corpus_notes WHERE title = 'Sent twice in workerd'",
      );
      expect(rows).toEqual([{ id: first.body.note.id }]);
    } finally {
      stack.qstash.resumeDelivery();
    }
  });

  it("a client that gives up on an import and resends it with its key gets one import", async () => {
    // Its 4,000 jobs are not what this tests: held, then dropped, so they do not
    // queue ahead of the next tests' jobs (a sweep test waited 10 s behind them).
    stack.qstash.pauseDelivery();
    try {
      await resentImport();
    } finally {
      await waitFor(async () => {
        const { rows } = await t.pool.query(
          "SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL",
        );
        return rows[0].n === 0;
      }, 30_000);
      stack.qstash.reset();
      stack.qstash.resumeDelivery();
    }
  });

  async function resentImport() {
    const idem = crypto.randomUUID();
    const notes = Array.from({ length: 2_000 }, (_, i) => ({ title: `given up ${idem} ${i}` }));
    const headers = {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      "idempotency-key": idem,
    };
    // The client's timeout: it hangs up while the Worker is still importing, as a
    // client of a slow network would, not knowing whether the import committed.
    const controller = new AbortController();
    const first = stack
      .fetch("/notes/import", {
        method: "POST",
        headers,
        body: JSON.stringify({ notes }),
        signal: controller.signal,
      })
      .then((res) => res.text());
    setTimeout(() => controller.abort(), 300);
    await first.catch(() => undefined);

    const again = await call("POST", "/notes/import", { notes }, { "Idempotency-Key": idem });
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.ids).toHaveLength(2_000);
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM corpus_notes WHERE title LIKE $1", [
      `given up ${idem} %`,
    ]);
    expect(rows[0].n).toBe(2_000);
  }

  it("answers 202 with a Location to poll while the relay is backed off", async () => {
    await t.pool.query("UPDATE outbox_relay_state SET backoff_until = now() + interval '1 hour'");
    try {
      const res = await call("POST", "/suppliers", { name: "Backed-off Ltd" }, { Prefer: "wait=1" });
      expect(res.status).toBe(202);
      expect(res.headers.get("preference-applied")).toBe("wait=1");
      const id: string = res.body.events[0].id;
      expect(res.headers.get("location")).toBe(`/events/${id}`);
      expect(res.body.supplier.name).toBe("Backed-off Ltd");
      expect(res.body.events).toEqual([expect.objectContaining({ id, fannedOutAt: null, fanout: null })]);

      const polled = await call("GET", res.headers.get("location")!);
      expect(polled.status).toBe(200);
      expect(polled.body.event).toMatchObject({ id, state: "pending", fanout: null });
    } finally {
      await t.pool.query("UPDATE outbox_relay_state SET backoff_until = NULL, failures = 0");
    }
  });

  it("clamps a long wait to 10 s, and rejects a malformed one before anything commits", async () => {
    const clamped = await call(
      "POST",
      "/suppliers",
      { name: "Patient plc" },
      { Prefer: "respond-async, wait=60" },
    );
    expect(clamped.status).toBe(201);
    expect(clamped.headers.get("preference-applied")).toBe("wait=10");

    const before = await t.pool.query("SELECT count(*)::int AS n FROM suppliers");
    const bad = await call("POST", "/suppliers", { name: "Hasty" }, { Prefer: "wait=soon" });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: "BAD_REQUEST", requestId: expect.any(String) });
    expect(bad.body.error.message).toContain("Prefer: wait");
    const after = await t.pool.query("SELECT count(*)::int AS n FROM suppliers");
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it("an unknown event is a 404 in the envelope", async () => {
    const res = await call("GET", "/events/00000000-0000-4000-8000-000000000000");
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe("NOT_FOUND");
  });
});

describe("the cron sweep", () => {
  it("fans out what no kick did: rows written behind the Worker's back", async () => {
    // A direct insert: the trigger records the event, and no request kicks the relay.
    const { rows } = await t.pool.query(
      "INSERT INTO corpus_notes (title, body) VALUES ('Swept note', 'marmalade inventory') RETURNING id",
    );
    const noteId: string = rows[0].id;
    const [event] = await eventsAbout(t.pool, noteId);
    const pending = await call("GET", `/events/${event!.id}`, undefined, {});
    expect(pending.body.event.state).toBe("pending");

    const res = await stack.fetch("/__scheduled?cron=*+*+*+*+*");
    expect(res.status).toBe(200);
    await res.text();

    await waitFor(async () => {
      const { rows: fanned } = await t.pool.query(
        "SELECT fanout FROM events WHERE id = $1 AND fanned_out_at IS NOT NULL",
        [event!.id],
      );
      return fanned.length === 1;
    }, 10_000);
    await waitFor(() => indexed(noteId), 10_000);
    const search = await call("GET", "/notes/search?q=marmalade");
    expect(search.body.hits).toEqual([expect.objectContaining({ noteId })]);
    // The run is recorded with the cron that triggered it, which sets how late is late (ADR 0040).
    const { rows: runs } = await t.pool.query("SELECT cron FROM sweep_runs");
    expect(runs).toEqual([{ cron: "* * * * *" }]);
  });
});

describe("errors: one envelope", () => {
  it("bad input names each field; unknown routes and domain errors keep the envelope", async () => {
    const bad = await call("POST", "/notes", { title: " ", colour: "red" });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: "BAD_REQUEST", requestId: expect.any(String) });
    expect(bad.body.error.issues.map((i: { path: string }) => i.path).sort()).toEqual(["colour", "title"]);

    const supplier = await call("POST", "/suppliers", { name: "Edge" });
    const early = await call("POST", `/suppliers/${supplier.body.supplier.id}/activate`);
    expect(early.status).toBe(409);
    expect(early.body.error.code).toBe("CONFLICT");

    const unknown = await call("GET", "/nowhere");
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({ code: "NOT_FOUND", requestId: expect.any(String) });
  });
});

describe("the log", () => {
  it("stays quiet when a request's pool ends its idle connections (dashboard loads run queries in parallel)", async () => {
    // The Worker's console reaches this process's console through wrangler.
    const errors = vi.spyOn(console, "error");
    try {
      for (let i = 0; i < 3; i++) {
        const res = await stack.fetch("/dashboard", {
          headers: { Authorization: `Basic ${btoa(`admin:${stack.env.ADMIN_TOKEN}`)}` },
        });
        expect(res.status).toBe(200);
        await res.text();
      }
      // The pools end after the responses; a healthz answer later means they had time to.
      await call("GET", "/healthz");
      await call("GET", "/healthz");
      const logged = errors.mock.calls.map((args) => args.map(String).join(" "));
      expect(logged.filter((line) => line.includes("database pool"))).toEqual([]);
    } finally {
      errors.mockRestore();
    }
  });
});
