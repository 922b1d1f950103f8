import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Bindings } from "../../src/worker/env.ts";
import { resolveAlert } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// Resolving alerts through the admin API, as the dashboard's Resolve and the CLI's
// `alerts resolve` do: the app over node-postgres.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});
beforeEach(() => t.pool.query("TRUNCATE outbox_alerts RESTART IDENTITY"));

const admin = (path: string, body?: unknown, token = env.ADMIN_TOKEN) =>
  call(app, env, "POST", path, body, { headers: { authorization: `Bearer ${token}` } });
const open = async () =>
  (await t.pool.query("SELECT message FROM outbox_alerts WHERE resolved_at IS NULL ORDER BY id")).rows.map(
    (r) => r.message as string,
  );

describe("POST /admin/alerts/…/resolve", () => {
  it("resolves one alert by id, says when one was resolved before, and 404s an unknown one", async () => {
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO outbox_alerts (kind, message, resolved_at) VALUES
         ('event.poisoned', 'open one', NULL), ('event.poisoned', 'seen', '2026-12-05T09:00:00Z')
       RETURNING id`,
    );
    const [first, seen] = rows.map((r) => r.id);

    const res = await admin(`/admin/alerts/${first}/resolve`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: Number(first),
      kind: "event.poisoned",
      resolved: true,
      resolvedAt: expect.any(String),
    });
    expect(await open()).toEqual([]);
    const before = await admin(`/admin/alerts/${seen}/resolve`);
    expect(before.body).toEqual({
      id: Number(seen),
      kind: "event.poisoned",
      resolved: false,
      resolvedAt: "2026-12-05T09:00:00.000Z",
    });

    const unknown = await admin("/admin/alerts/424242/resolve");
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toMatchObject({ code: "NOT_FOUND", message: "alert 424242 not found" });
    expect((await admin("/admin/alerts/abc/resolve")).status).toBe(404);
    // 2^53 + 1 is not a JS number: no route, never the alert at 2^53 it would round to.
    await t.pool.query(
      `INSERT INTO outbox_alerts (id, kind, message) OVERRIDING SYSTEM VALUE VALUES (9007199254740992, 'event.poisoned', 'at 2^53')`,
    );
    expect((await admin("/admin/alerts/9007199254740993/resolve")).status).toBe(404);
    expect(await open()).toEqual(["at 2^53"]);
    expect((await admin(`/admin/alerts/${first}/resolve`, undefined, "wrong-token-0123456789")).status).toBe(
      401,
    );
  });

  it("resolves every open alert of a kind up to the newest the caller saw, and no other kind", async () => {
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO outbox_alerts (kind, message) VALUES
         ('event.poisoned', 'A'), ('relay.failing', 'relay'), ('event.poisoned', 'B'), ('event.poisoned', 'C, later')
       RETURNING id`,
    );
    const upTo = Number(rows[2]!.id);

    const res = await admin("/admin/alerts/resolve", { kind: "event.poisoned", upTo });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ kind: "event.poisoned", resolved: 2 });
    expect(await open()).toEqual(["relay", "C, later"]);

    // A kind no alert has is a mistake, not "resolved 0"; one with none open is 0.
    const typo = await admin("/admin/alerts/resolve", { kind: "event.posioned", upTo });
    expect(typo.status).toBe(400);
    expect(typo.body.error.issues).toEqual([
      { path: "kind", message: expect.stringMatching(/^must be an alert kind: event\.poisoned, /) },
    ]);
    expect((await admin("/admin/alerts/resolve", { kind: "relay.lagging", upTo })).body).toEqual({
      kind: "relay.lagging",
      resolved: 0,
    });
    // One an older version raised, still open, is still resolved by its kind.
    const { rows: old } = await t.pool.query<{ id: string }>(
      "INSERT INTO outbox_alerts (kind, message) VALUES ('legacy.kind', 'from before') RETURNING id",
    );
    expect(
      (await admin("/admin/alerts/resolve", { kind: "legacy.kind", upTo: Number(old[0]!.id) })).body,
    ).toEqual({ kind: "legacy.kind", resolved: 1 });

    const missing = await admin("/admin/alerts/resolve", { kind: "event.poisoned" });
    expect(missing.status).toBe(400);
    expect(missing.body.error.issues).toContainEqual(expect.objectContaining({ path: "upTo" }));
    expect(await open()).toEqual(["relay", "C, later"]);
  });

  it("an alert another operator resolves meanwhile reads as resolved before, not as unknown", async () => {
    const { rows } = await t.pool.query<{ id: string }>(
      "INSERT INTO outbox_alerts (kind, message) VALUES ('event.poisoned', 'raced') RETURNING id",
    );
    const id = Number(rows[0]!.id);
    const other = await t.pool.connect();
    try {
      // The other operator's resolve holds the row until it commits; ours waits on it.
      await other.query("BEGIN");
      const { rows: theirs } = await other.query<{ resolved_at: Date }>(
        "UPDATE outbox_alerts SET resolved_at = now() WHERE id = $1 RETURNING resolved_at",
        [id],
      );
      const ours = resolveAlert(t.pool, id);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await other.query("COMMIT");
      expect(await ours).toEqual({
        wasOpen: false,
        resolvedAt: theirs[0]!.resolved_at,
        kind: "event.poisoned",
      });
    } finally {
      other.release();
    }
  });
});
