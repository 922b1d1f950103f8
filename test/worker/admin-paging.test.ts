import { beforeAll, describe, expect, it } from "vitest";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { insertJobFailure } from "../support/job-failures.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// The admin listings a page at a time, as the CLI and the dashboard page them: each
// answers `nextBefore`, the `before` of its next (older) page, null on the last.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});

const get = (path: string) =>
  call(app, env, "GET", path, undefined, { headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } });

/**
 * Follows `nextBefore` from the first page to the one that answers null, with the
 * query kept on every page. Answers every row seen, in order, and the size of each page.
 */
async function everyPage<Row>(path: string, key: string): Promise<{ rows: Row[]; sizes: number[] }> {
  const rows: Row[] = [];
  const sizes: number[] = [];
  let before: number | null = null;
  for (let page = 0; page < 20; page++) {
    const res = await get(before === null ? path : `${path}&before=${before}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual([key, "nextBefore"].sort());
    rows.push(...(res.body[key] as Row[]));
    sizes.push((res.body[key] as Row[]).length);
    before = res.body.nextBefore as number | null;
    if (before === null) return { rows, sizes };
    expect(before).toEqual(expect.any(Number));
  }
  throw new Error(`${path}: nextBefore never came back null`);
}

/** A before that is not a whole number from 1 is a 400 naming it; one that is pages, even past every row. */
async function expectBadBefore(path: string, key: string) {
  const join = path.includes("?") ? "&" : "?";
  for (const [before, message] of [
    ["x", "must be a whole number"],
    ["-1", "must be a whole number"],
    ["1.5", "must be a whole number"],
    ["1e3", "must be a whole number"],
    ["", "must be a whole number"],
    ["0", "must be at least 1"],
  ]) {
    const res = await get(`${path}${join}before=${before}`);
    expect(res.status, before).toBe(400);
    expect(res.body.error.code, before).toBe("BAD_REQUEST");
    expect(res.body.error.issues, before).toEqual([{ path: "before", message }]);
  }
  const oldest = await get(`${path}${join}before=1`);
  expect(oldest.status).toBe(200);
  expect(oldest.body).toEqual({ [key]: [], nextBefore: null });
}

describe("GET /admin/events?before=", () => {
  it("pages through every event once, newest first by seq, and ends with nextBefore null", async () => {
    const all = await seedEvents(t.pool, 7, { type: "paging.all" });
    const { rows, sizes } = await everyPage<{ id: string; seq: number }>("/admin/events?limit=3", "events");
    expect(rows.map((e) => e.id)).toEqual([...all].reverse());
    expect(sizes).toEqual([3, 3, 1]);
    const seqs = rows.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => b - a));
  });

  it("keeps its filters on every page, and ends on a full last page without an empty one", async () => {
    const wanted: string[] = [];
    // Interleaved, so a page cut without the filter would show the other type.
    for (let i = 0; i < 4; i++) {
      wanted.push(...(await seedEvents(t.pool, 1, { type: "paging.wanted", scope: "acme" })));
      await seedEvents(t.pool, 2, { type: "paging.other", scope: "acme" });
    }
    const { rows, sizes } = await everyPage<{ id: string }>(
      "/admin/events?type=paging.w*&scope=acme&state=pending&limit=2",
      "events",
    );
    expect(rows.map((e) => e.id)).toEqual([...wanted].reverse());
    expect(sizes).toEqual([2, 2]);
  });

  it("lists the events without a scope for scope= with no value, a page at a time", async () => {
    const unscoped: string[] = [];
    for (let i = 0; i < 3; i++) {
      unscoped.push(...(await seedEvents(t.pool, 1, { type: "paging.unscoped" })));
      await seedEvents(t.pool, 1, { type: "paging.unscoped", scope: "acme" });
    }
    const { rows } = await everyPage<{ id: string; scope: string | null }>(
      "/admin/events?type=paging.unscoped&scope=&limit=2",
      "events",
    );
    expect(rows.map((e) => e.id)).toEqual([...unscoped].reverse());
    expect(rows.every((e) => e.scope === null)).toBe(true);
    // A scope is a scope's events; one longer than any scope can be is refused, naming the limit.
    const acme = await get("/admin/events?type=paging.unscoped&scope=acme");
    expect((acme.body.events as { scope: string }[]).map((e) => e.scope)).toEqual(["acme", "acme", "acme"]);
    const long = await get(`/admin/events?scope=${"s".repeat(129)}`);
    expect(long.status).toBe(400);
    expect(long.body.error.issues).toEqual([
      {
        path: "scope",
        message: "must be one line of at most 128 characters, or empty for rows without a scope",
      },
    ]);
  });

  it("refuses a before that is not a whole number from 1, naming it, and takes one that is", async () => {
    await expectBadBefore("/admin/events", "events");
    await expectBadBefore("/admin/events?state=pending", "events");
  });
});

describe("GET /admin/alerts?before=", () => {
  it("pages through every alert once, newest first by id, the open ones alone with open=true", async () => {
    await t.pool.query("TRUNCATE outbox_alerts RESTART IDENTITY");
    const { rows: inserted } = await t.pool.query<{ id: string; resolved_at: Date | null }>(
      `INSERT INTO outbox_alerts (kind, message, resolved_at)
       SELECT 'event.poisoned', 'alert ' || n, CASE WHEN n % 3 = 0 THEN now() END
         FROM generate_series(1, 8) AS n
       RETURNING id, resolved_at`,
    );
    const ids = inserted.map((r) => Number(r.id)).reverse();
    const openIds = inserted
      .filter((r) => r.resolved_at === null)
      .map((r) => Number(r.id))
      .reverse();

    const all = await everyPage<{ id: number }>("/admin/alerts?limit=3", "alerts");
    expect(all.rows.map((a) => a.id)).toEqual(ids);
    expect(all.sizes).toEqual([3, 3, 2]);

    const open = await everyPage<{ id: number; resolvedAt: string | null }>(
      "/admin/alerts?open=true&limit=2",
      "alerts",
    );
    expect(open.rows.map((a) => a.id)).toEqual(openIds);
    expect(open.rows.every((a) => a.resolvedAt === null)).toBe(true);
    expect(open.sizes).toEqual([2, 2, 2]);
  });

  it("refuses a before that is not a whole number from 1, naming it, and takes one that is", async () => {
    await expectBadBefore("/admin/alerts", "alerts");
    await expectBadBefore("/admin/alerts?open=true", "alerts");
  });
});

describe("GET /admin/job-failures?before=", () => {
  it("pages through every job failure once, newest first by id, and ends with nextBefore null", async () => {
    await t.pool.query("TRUNCATE job_failures");
    const ids: number[] = [];
    for (let i = 0; i < 7; i++) ids.push(await insertJobFailure(t.pool));

    const { rows, sizes } = await everyPage<{ id: number }>("/admin/job-failures?limit=3", "jobFailures");
    expect(rows.map((f) => f.id)).toEqual([...ids].reverse());
    expect(sizes).toEqual([3, 3, 1]);
  });

  it("refuses a before that is not a whole number from 1, naming it, and takes one that is", async () => {
    await expectBadBefore("/admin/job-failures", "jobFailures");
  });
});
