import { beforeAll, describe, expect, it } from "vitest";
import { browseEvents, type BrowseOptions, type EventState } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";

// The events page's filters, checked against the rows themselves: every filter and
// combination the page offers must return exactly the matching rows, newest seq
// first, across keyset pages. The look-up that turns a time range into a seq range
// assumes created_at grows with seq; the seed breaks that on purpose (rows of long
// transactions, recorded long before or after their seq neighbours) so a page that
// trusted it would miss them. Enough rows for many BRIN block ranges, summarised,
// so the bands above and below a range really are found by block-range pruning
// (payloads padded to ~400 bytes so the table spans ~30 ranges of 16 pages).

const t = useTestDatabase();

const N = 6_000;
const BASE = Date.UTC(2026, 0, 1);
const minute = (m: number) => new Date(BASE + m * 60_000);

interface Row {
  seq: number;
  type: string;
  subject: string;
  scope: string | null;
  createdAt: Date;
  state: EventState;
}

let all: Row[] = [];

beforeAll(async () => {
  await t.pool.query(`TRUNCATE events RESTART IDENTITY`);
  // Row g was recorded at minute g, except: every 500th (from 250) 3,000 minutes
  // earlier, every 700th (from 350) 2,000 minutes later, and rows 100–102 at
  // minute 1,000 exactly, as row 1,000 is (a range edge shared by rows far apart).
  await t.pool.query(
    `INSERT INTO events (type, subject, scope, payload, created_at, fanned_out_at, fanout, attempts, last_error, poisoned_at)
     SELECT CASE WHEN g % 97 = 0 THEN 'audit.rare.checked'
                 WHEN g % 89 = 0 THEN 'weird_type%x'
                 WHEN g % 83 = 0 THEN 'weirdXtype%x'
                 WHEN g % 3 = 0 THEN 'order.created'
                 WHEN g % 3 = 1 THEN 'order.shipped'
                 ELSE 'supplier.checked' END,
            's-' || (g % 40), CASE WHEN g % 11 = 0 THEN NULL ELSE 'tenant-' || (g % 5) END,
            jsonb_build_object('pad', repeat('x', 400)), at,
            CASE WHEN state = 'fanned' THEN at + interval '1 second' END,
            CASE WHEN state = 'fanned' THEN '{}'::jsonb END,
            CASE WHEN state = 'poisoned' THEN 5 ELSE 0 END,
            CASE WHEN state = 'poisoned' THEN 'boom' END,
            CASE WHEN state = 'poisoned' THEN at END
       FROM generate_series(1, ${N}) g,
            LATERAL (SELECT $1::timestamptz + make_interval(mins => CASE
                              WHEN g BETWEEN 100 AND 102 THEN 1000
                              WHEN g % 500 = 250 THEN g - 3000
                              WHEN g % 700 = 350 THEN g + 2000
                              ELSE g END) AS at,
                            CASE WHEN g % 13 = 0 THEN 'pending'
                                 WHEN g % 17 = 0 THEN 'poisoned'
                                 ELSE 'fanned' END AS state) s`,
    [new Date(BASE)],
  );
  // Summarises every block range of the BRIN index (on events_browse, which the
  // insert trigger filled), as autovacuum would.
  await t.pool.query(`VACUUM ANALYZE events, events_browse`);
  const { rows } = await t.pool.query<{
    seq: string;
    type: string;
    subject: string;
    scope: string | null;
    created_at: Date;
    fanned_out_at: Date | null;
    poisoned_at: Date | null;
  }>(`SELECT seq, type, subject, scope, created_at, fanned_out_at, poisoned_at FROM events`);
  all = rows.map((r) => ({
    seq: Number(r.seq),
    type: r.type,
    subject: r.subject,
    scope: r.scope,
    createdAt: r.created_at,
    state: r.fanned_out_at ? "fanned" : r.poisoned_at ? "poisoned" : "pending",
  }));
  expect(all).toHaveLength(N);
});

/** What the filter must return, computed from the rows, newest seq first. */
function expected(f: BrowseOptions): number[] {
  const glob = f.type
    ? new RegExp(`^${f.type.replace(/[.*+?^${}()|[\]\\%_]/g, (c) => (c === "*" ? ".*" : `\\${c}`))}$`)
    : undefined;
  return all
    .filter(
      (r) =>
        (!f.state || r.state === f.state) &&
        (!glob || glob.test(r.type)) &&
        (!f.subject || r.subject === f.subject) &&
        (!f.scope || r.scope === f.scope) &&
        (!f.from || r.createdAt >= f.from) &&
        (!f.to || r.createdAt < f.to) &&
        (f.beforeSeq === undefined || r.seq < f.beforeSeq),
    )
    .map((r) => r.seq)
    .sort((a, b) => b - a);
}

/** Every page from the filter's first, following nextBeforeSeq. */
/** Every page of `f`, `limit` rows each (`full` when pageBytes cuts them sooner) but the last. */
async function pageThrough(
  f: BrowseOptions,
  limit: number,
  { pageBytes, full = limit }: { pageBytes?: number; full?: number } = {},
): Promise<number[][]> {
  const pages: number[][] = [];
  let before = f.beforeSeq;
  for (;;) {
    const page = await browseEvents(t.pool, {
      ...f,
      ...(before !== undefined ? { beforeSeq: before } : {}),
      limit,
      ...(pageBytes !== undefined ? { pageBytes } : {}),
    });
    pages.push(page.events.map((e) => e.seq));
    if (page.nextBeforeSeq === null) return pages;
    expect(page.events).toHaveLength(full);
    expect(page.nextBeforeSeq).toBe(page.events[full - 1]!.seq);
    before = page.nextBeforeSeq;
    if (pages.length > 200) throw new Error("more pages than the filter has rows for");
  }
}

const oneDay = { from: minute(1000), to: minute(2440) };
const cases: [string, BrowseOptions][] = [
  ["no filter", {}],
  ["state pending", { state: "pending" }],
  ["state fanned", { state: "fanned" }],
  ["state poisoned", { state: "poisoned" }],
  ["type glob with a prefix", { type: "order.*" }],
  ["type glob without a prefix", { type: "*.checked" }],
  ["type glob matching everything", { type: "*" }],
  ["type exact", { type: "audit.rare.checked" }],
  ["type glob whose _ and % are literal", { type: "weird_*" }],
  ["type exact with % and _", { type: "weird_type%x" }],
  ["type matching nothing", { type: "nothing.*" }],
  ["subject", { subject: "s-7" }],
  ["subject matching nothing", { subject: "nobody" }],
  ["scope", { scope: "tenant-2" }],
  ["time range whose edges are rows' created_at", oneDay],
  ["time range, from only", { from: minute(5000) }],
  ["time range, to only", { to: minute(900) }],
  ["time range holding only rows recorded out of seq order", { from: minute(-2800), to: minute(-2000) }],
  ["time range after every seq neighbour (late rows only)", { from: minute(6100), to: minute(9000) }],
  ["time range before every row", { to: minute(-5000) }],
  ["empty time range (from after to)", { from: minute(3000), to: minute(2000) }],
  ["time range + keyset cursor inside it", { ...oneDay, beforeSeq: 1800 }],
  ["time range + keyset cursor above it", { ...oneDay, beforeSeq: 5000 }],
  ["time range + keyset cursor below it", { to: minute(3000), beforeSeq: 500 }],
  ["time range + subject", { from: minute(-3000), to: minute(4000), subject: "s-10" }],
  [
    "time range + type glob + state",
    { from: minute(500), to: minute(5500), type: "order.*", state: "fanned" },
  ],
  [
    "time range + scope + type + state",
    { from: minute(-3000), to: minute(8000), scope: "tenant-1", type: "*.checked", state: "pending" },
  ],
  ["state + subject + scope", { state: "poisoned", subject: "s-11", scope: "tenant-1" }],
  ["type glob + keyset cursor", { type: "audit.*", beforeSeq: 3000 }],
  [
    "every filter at once",
    {
      state: "fanned",
      type: "order.*",
      subject: "s-3",
      scope: "tenant-3",
      from: minute(0),
      to: minute(7000),
    },
  ],
];

describe("events page filters", () => {
  it.each(cases)("%s: exactly the matching rows, newest seq first, across pages", async (_name, f) => {
    const want = expected(f);
    // About six pages each, so page edges fall in different places per filter.
    const limit = Math.min(500, Math.max(3, Math.ceil(want.length / 6)));
    const pages = await pageThrough(f, limit);
    expect(pages.flat()).toEqual(want);
  });

  // A page of big events ends early with its cursor (PAGE_PAYLOAD_BYTES; each seed
  // payload is 411 bytes as text, so 20,000 bytes cut a page after 49 rows).
  it.each(cases)("%s: cut by its payload bytes, still every row once", async (_name, f) => {
    const pages = await pageThrough(f, 60, { pageBytes: 20_000, full: 49 });
    expect(pages.flat()).toEqual(expected(f));
  });

  it("holds a first row bigger than the budget alone, then moves on", async () => {
    const { rows } = await t.pool.query<{ seq: string }>(
      `INSERT INTO events (type, subject, payload) VALUES
         ('big.one', 'b', jsonb_build_object('pad', repeat('x', 3000))),
         ('big.one', 'b', jsonb_build_object('pad', repeat('y', 3000))),
         ('big.one', 'b', '{}')
       RETURNING seq`,
    );
    try {
      const seqs = rows.map((r) => Number(r.seq)).sort((a, b) => b - a);
      const f: BrowseOptions = { type: "big.one", limit: 10, pageBytes: 2_000 };
      const first = await browseEvents(t.pool, f);
      // The newest ({}) and the next (3 KB, over the budget alone) fit; the third waits.
      expect(first.events.map((e) => e.seq)).toEqual(seqs.slice(0, 2));
      expect(first.nextBeforeSeq).toBe(seqs[1]);
      // Said, so a page of two where ten were asked is not read as the end of the rows.
      expect(first.cutByBytes).toBe(true);
      const second = await browseEvents(t.pool, { ...f, beforeSeq: first.nextBeforeSeq! });
      expect(second.events.map((e) => e.seq)).toEqual(seqs.slice(2));
      expect(second.nextBeforeSeq).toBeNull();
      expect(second.cutByBytes).toBeUndefined();
    } finally {
      await t.pool.query(`DELETE FROM events WHERE seq > $1`, [N]);
    }
  });

  it("seeds what the cases rely on: rows out of seq order, rows on a range edge, every state", () => {
    const outOfOrder = all.filter((r) => Math.abs(+r.createdAt - +minute(r.seq)) >= 2000 * 60_000);
    expect(outOfOrder.length).toBeGreaterThanOrEqual(15);
    // Rows 100–102 and row 1,000 itself.
    expect(all.filter((r) => +r.createdAt === +oneDay.from)).toHaveLength(4);
    expect(all.filter((r) => +r.createdAt === +oneDay.to).length).toBeGreaterThan(0);
    expect(new Set(all.map((r) => r.state))).toEqual(new Set(["pending", "fanned", "poisoned"]));
    // The range-edge and out-of-order cases are not vacuous.
    expect(expected(oneDay).length).toBeGreaterThan(1000);
    expect(expected({ from: minute(-2800), to: minute(-2000) }).length).toBeGreaterThan(0);
    expect(expected({ from: minute(6100), to: minute(9000) }).length).toBeGreaterThan(0);
  });

  it("keeps pages stable while new events are recorded", async () => {
    const f: BrowseOptions = { type: "order.*", from: minute(0) };
    const first = await browseEvents(t.pool, { ...f, limit: 20 });
    const { rows } = await t.pool.query<{ seq: string }>(
      `INSERT INTO events (type, subject, created_at) SELECT 'order.created', 's-1', $1 FROM generate_series(1, 30)
       RETURNING seq`,
      [minute(100)],
    );
    try {
      const second = await browseEvents(t.pool, { ...f, beforeSeq: first.nextBeforeSeq!, limit: 20 });
      expect(second.events.map((e) => e.seq)).toEqual(expected(f).slice(20, 40));
      // A reload shows them first: their seq is the highest.
      const reloaded = await browseEvents(t.pool, { ...f, limit: 30 });
      expect(reloaded.events.map((e) => e.seq)).toEqual(rows.map((r) => Number(r.seq)).sort((a, b) => b - a));
    } finally {
      await t.pool.query(`DELETE FROM events WHERE seq > $1`, [N]);
    }
  });
});

describe("events page statements", () => {
  /** The SQL browseEvents sends, each statement with its values, answered by the real database. */
  async function statements(f: BrowseOptions): Promise<{ text: string; values: unknown[] }[]> {
    const sent: { text: string; values: unknown[] }[] = [];
    await browseEvents(
      {
        query: (text: string, values: unknown[] = []) => {
          sent.push({ text, values });
          return t.pool.query(text, values);
        },
      },
      { ...f, limit: 50 },
    );
    return sent;
  }

  async function plan(s: { text: string; values: unknown[] }): Promise<string> {
    const { rows } = await t.pool.query<{ "QUERY PLAN": string }>(`EXPLAIN ${s.text}`, s.values);
    return rows.map((r) => r["QUERY PLAN"]).join("\n");
  }

  it("sends one statement when no filter needs a look-up", async () => {
    expect(
      await statements({ state: "fanned", subject: "s-1", scope: "tenant-1", type: "order.created" }),
    ).toHaveLength(1);
  });

  it("finds a time range's out-of-order rows through the BRIN index, never by walking the primary key", async () => {
    const sent = await statements({ to: minute(2000) });
    expect(sent).toHaveLength(2);
    const page = await plan(sent[1]!);
    // The band above the range asks for seq + 0, which only the BRIN index serves.
    expect(page).toMatch(/Bitmap Index Scan on events_browse_seq_created_brin/);
    // No scan filters rows on it one by one (a walk of everything above the range).
    expect(page).not.toMatch(/Filter: .*seq \+ 0/);
  });

  it("resolves a glob to the types present and asks for them by equality", async () => {
    const sent = await statements({ type: "*.checked" });
    expect(sent).toHaveLength(2);
    expect(sent[1]!.text).toMatch(/type = ANY\(/);
    expect(sent[1]!.values).toContainEqual(["audit.rare.checked", "supplier.checked"]);
  });
});
