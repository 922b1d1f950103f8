import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { poisonEvents, seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// Requeueing poisoned events in bulk through the admin API, as `events requeue
// --all` does from a terminal: the app over node-postgres.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});
beforeEach(() => resetOutbox(t.pool));

const requeuePoisoned = (body: unknown, token = env.ADMIN_TOKEN) =>
  call(app, env, "POST", "/admin/events/requeue-poisoned", body, {
    headers: { authorization: `Bearer ${token}` },
  });

const poisonAt = (ids: string[], at: string) => poisonEvents(t.pool, ids, at);
const poisoned = async () =>
  (await t.pool.query(`SELECT type FROM events WHERE poisoned_at IS NOT NULL ORDER BY seq`)).rows.map(
    (r) => r.type as string,
  );

describe("POST /admin/events/requeue-poisoned", () => {
  it("puts back a thousand a request those poisoned up to the time given, of the type given", async () => {
    const suppliers = await seedEvents(t.pool, 1_200, { type: "supplier.connected" });
    const notes = await seedEvents(t.pool, 2, { type: "corpus.note.created" });
    const [late] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
    await poisonAt([...suppliers, ...notes], "2026-12-05T17:00:00Z");
    await poisonAt([late!], "2026-12-05T18:00:01Z");
    const upTo = "2026-12-05T19:00:00+01:00";

    const first = await requeuePoisoned({ upTo, type: "supplier.*" });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ requeued: 1_000, more: true });
    expect((await requeuePoisoned({ upTo, type: "supplier.*" })).body).toEqual({
      requeued: 200,
      more: false,
    });
    expect(await poisoned()).toEqual(["corpus.note.created", "corpus.note.created", "supplier.connected"]);
    expect((await requeuePoisoned({ upTo })).body).toEqual({ requeued: 2, more: false });
    // Poisoned after the time given: left for the operator to see.
    expect(await poisoned()).toEqual(["supplier.connected"]);
  });

  it("takes back the poisonedAt the API showed: to the millisecond, while Postgres keeps the microsecond", async () => {
    const [seen, later] = await seedEvents(t.pool, 2, { type: "supplier.connected" });
    await poisonAt([seen!], "2026-12-07T08:43:52.141975Z");
    await poisonAt([later!], "2026-12-07T08:43:52.142001Z");
    const listed = await call(app, env, "GET", "/admin/events?state=poisoned", undefined, {
      headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` },
    });
    const shown = listed.body.events.find((e: { id: string }) => e.id === seen).poisonedAt as string;
    expect(shown).toBe("2026-12-07T08:43:52.141Z");

    // Sent back as read, it was short of its own event's 52.141975 and requeued nothing.
    expect((await requeuePoisoned({ upTo: shown })).body).toEqual({ requeued: 1, more: false });
    expect(await poisoned()).toEqual(["supplier.connected"]);
    // A time given to the second takes that whole second in.
    expect((await requeuePoisoned({ upTo: "2026-12-07T08:43:52Z" })).body).toEqual({
      requeued: 1,
      more: false,
    });
    expect(await poisoned()).toEqual([]);
  });

  it("refuses a body it cannot read, naming the field, and a caller without the token", async () => {
    const cases: [unknown, string][] = [
      [{}, "upTo"],
      [{ upTo: "yesterday" }, "upTo"],
      [{ upTo: "2026-12-05T18:00:00" }, "upTo"],
      [{ upTo: "2026-12-05 18:00:00+00" }, "upTo"],
      [{ upTo: 1_764_950_400_000 }, "upTo"],
      [{ upTo: "2026-12-05T18:00:00Z", type: "Bad Type" }, "type"],
      [{ upTo: "2026-12-05T18:00:00Z", type: "" }, "type"],
      [{ upTo: "2026-12-05T18:00:00Z", ids: [] }, "ids"],
    ];
    const [id] = await seedEvents(t.pool, 1);
    await poisonAt([id!], "2026-12-05T17:00:00Z");
    for (const [body, path] of cases) {
      const res = await requeuePoisoned(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe("BAD_REQUEST");
      expect(
        res.body.error.issues.map((i: { path: string }) => i.path),
        JSON.stringify(body),
      ).toContain(path);
    }
    expect((await requeuePoisoned({ upTo: "2026-12-05T18:00:00Z" }, "wrong-token-0123456789")).status).toBe(
      401,
    );
    expect(await poisoned()).toEqual(["test.happened"]);
  });
});

describe("GET /admin/events/:id of a poisoned event its type's alert counts under a later one", () => {
  const show = (id: string) =>
    call(app, env, "GET", `/admin/events/${id}`, undefined, {
      headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` },
    });

  it("lists the alert among countingAlerts while the event is poisoned", async () => {
    const [earlier, latest] = await seedEvents(t.pool, 2, { type: "supplier.connected" });
    await poisonAt([earlier!], "2026-12-07T08:00:00Z");
    await poisonAt([latest!], "2026-12-07T09:00:00Z");

    const own = (await show(latest!)).body.event;
    expect(own.alerts.map((a: { kind: string }) => a.kind)).toEqual(["event.poisoned"]);
    expect(own.countingAlerts).toEqual([]);
    const counted = (await show(earlier!)).body.event;
    expect(counted.alerts).toEqual([]);
    expect(counted.countingAlerts).toMatchObject([
      { kind: "event.poisoned", eventId: latest, details: { type: "supplier.connected", count: 2 } },
    ]);

    // Put back, it is no longer what the alert counts.
    await t.pool.query(`UPDATE events SET poisoned_at = NULL WHERE id = $1`, [earlier]);
    expect((await show(earlier!)).body.event.countingAlerts).toEqual([]);
  });
});
