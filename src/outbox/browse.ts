import { InvalidInputError } from "./errors.ts";
import {
  COLUMNS,
  MAX_LIST_LIMIT,
  assertEventId,
  globToLike,
  toEvent,
  type DbEvent,
  type EventRow,
} from "./operations.ts";
import { keysetPage, query, type Queryable } from "./sql.ts";
import { STATE_SQL, idsSql, type EventState } from "./state.ts";

export interface EventFilter {
  state?: EventState;
  /** A glob over the type, as subscriptions write them: `supplier.*`. */
  type?: string;
  subject?: string;
  /** A scope, or null for the events without one. */
  scope?: string | null;
  /** Recorded at or after. */
  from?: Date;
  /** Recorded before. */
  to?: Date;
  /** Only these events (e.g. the ones just requeued). */
  ids?: string[];
}

export interface BrowseOptions extends EventFilter {
  /** Keyset cursor: only rows with a smaller seq (the previous page's last). */
  beforeSeq?: number;
  limit?: number;
  /** PAGE_PAYLOAD_BYTES, smaller for a test. */
  pageBytes?: number;
}

export interface EventPage {
  events: EventRow[];
  /** The cursor for the next (older) page, or null when this is the last. */
  nextBeforeSeq: number | null;
  /** Ended early, before `limit` rows, because their payloads filled PAGE_PAYLOAD_BYTES. */
  cutByBytes?: true;
}

/**
 * A page reads events_browse (b), the dashboard's keys of every event with the
 * events page's indexes, joined to events (e) by seq for the rest of each row. The
 * keys live apart so that the relay's mark, which updates every row of events it
 * fans out, does not pay an entry in each of those indexes (docs/adr/0016).
 */
const PAGE_SOURCE = "events_browse b JOIN events e ON e.seq = b.seq";
const PAGE_COLUMNS = COLUMNS.split(",")
  .map((c) => `e.${c.trim()}`)
  .join(", ");

/**
 * A seq bound on both sides of the join. The planner carries b.seq = e.seq to
 * constants, not to inequalities: with the bound on b alone, a merge join walked
 * events' primary key from the newest row down to the cursor (354 ms for a keyset
 * page at the middle of a million rows, against 0.2 ms with both).
 */
function bothSeqs(op: "<" | ">=", value: string): string {
  return `b.seq ${op} ${value} AND e.seq ${op} ${value}`;
}

/** A statement's text and values, built one bound value at a time. */
class Statement {
  readonly values: unknown[] = [];
  bind(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/**
 * Newest first, one page at a time. Pages are cut by seq (keyset), never by
 * OFFSET: a page deep in a million rows costs what the first one does, and rows
 * recorded while an operator pages do not shift what the next page shows.
 * seq is only an order here, not a completeness cursor (see docs/adr/0001): a
 * row committed late with a smaller seq appears when the operator reloads.
 *
 * Every filter is exact; how each one finds its rows in a million without an index
 * per filter on the relay's hot path is docs/adr/0013. In short: a type glob is
 * first resolved to the concrete types present, a time range to the seq range it
 * mostly occupies, in one look-up statement (only when the filter has either), and
 * the page statement then uses what the planner can estimate.
 */
export async function browseEvents(db: Queryable, options: BrowseOptions = {}): Promise<EventPage> {
  const limit = options.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new InvalidInputError(`limit must be an integer from 1 to ${MAX_LIST_LIMIT}`);
  }
  options.ids?.forEach(assertEventId);
  const { types, fromSeq, toSeq } = await lookUp(db, options);
  if (types?.length === 0) return { events: [], nextBeforeSeq: null };

  const s = new Statement();
  // The filters on events' own columns (e) and on the keys in events_browse (b),
  // whose indexes serve them.
  const own: string[] = [];
  const keys: string[] = [];
  if (options.state) own.push(STATE_SQL[options.state]);
  if (types) keys.push(`b.type = ANY(${s.bind(types)}::text[])`);
  if (options.subject) keys.push(`b.subject = ${s.bind(options.subject)}`);
  if (options.scope === null) keys.push("b.scope IS NULL");
  else if (options.scope) keys.push(`b.scope = ${s.bind(options.scope)}`);
  if (options.from) keys.push(`b.created_at >= ${s.bind(options.from)}`);
  if (options.to) keys.push(`b.created_at < ${s.bind(options.to)}`);
  if (options.ids) own.push(idsSql(s.bind(options.ids), "e"));
  // One row more than asked tells whether an older page exists, without a count.
  const take = s.bind(limit + 1);
  const before = options.beforeSeq;

  let text: string;
  if (keys.length === 0) {
    // No key filter: events alone, walked by its primary key or a state's partial
    // index, as before the keys moved (a join here made `poisoned` walk
    // events_browse's key backwards: 13 ms against 2 ms at a million events).
    const where = [...own, ...(before !== undefined ? [`e.seq < ${s.bind(before)}`] : [])];
    text = `SELECT ${PAGE_COLUMNS} FROM events e ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
             ORDER BY e.seq DESC LIMIT ${take}`;
  } else if (fromSeq === undefined && toSeq === undefined) {
    const where = [...own, ...keys, ...(before !== undefined ? [bothSeqs("<", s.bind(before))] : [])];
    text = `SELECT ${PAGE_COLUMNS} FROM ${PAGE_SOURCE} WHERE ${where.join(" AND ")}
             ORDER BY b.seq DESC LIMIT ${take}`;
  } else {
    text = timeRangePage(s, { own, keys }, take, { fromSeq, toSeq, before });
  }
  const budget = s.bind(options.pageBytes ?? PAGE_PAYLOAD_BYTES);
  const { rows: found } = await query<DbEvent & { page_found: string }>(
    db,
    `SELECT * FROM (
       SELECT p.*, sum(w.bytes) OVER (ORDER BY p.seq DESC ROWS UNBOUNDED PRECEDING) - w.bytes AS bytes_before,
              count(*) OVER () AS page_found
         FROM (${text}) p CROSS JOIN LATERAL (SELECT octet_length(p.payload::text) AS bytes) w
     ) q WHERE q.bytes_before < ${budget} ORDER BY q.seq DESC`,
    s.values,
  );
  const events = found.map(toEvent);
  // Cut short by the budget (the first row never is): the rows left out are the next page's.
  if (found.length > 0 && found.length < Number(found[0]!.page_found))
    return { events, nextBeforeSeq: events.at(-1)!.seq, cutByBytes: true };
  const page = keysetPage(events, limit, (e) => e.seq);
  return { events: page.rows, nextBeforeSeq: page.nextBefore };
}

/**
 * The payload bytes one page holds, at most, before its last row (a job-failures
 * list's bodies too): events may be ~1 MB each (MAX_EVENT_BYTES), and a page of 50
 * such, the dashboard's, was a 48 MB answer (measured under wrangler dev, which
 * served it), held as rows, as objects and as JSON text in an isolate Workers allow
 * 128 MB. A page of big events ends early with its cursor, so following it still
 * reaches every row; the first row always comes (ADR 0042).
 */
export const PAGE_PAYLOAD_BYTES = 4_000_000;

interface LookUp {
  /** The concrete types the glob matches, when it has a wildcard. */
  types?: string[];
  /** The first seq recorded at or after `from` / `to`, as if seq followed created_at. */
  fromSeq?: number;
  toSeq?: number;
}

/**
 * One statement, sent only when the filter has a wildcard glob or a time bound.
 *
 * Types: a loose scan of events_browse's type index (one probe per distinct type, and types are
 * few), matched against the glob here, so the page asks `type = ANY(...)`, which the
 * planner estimates from its statistics and the index serves whatever the glob's
 * shape (`*.failed` has no prefix a LIKE could use).
 *
 * Seqs: a binary search over events_browse's primary key (seq) for the first row recorded at or
 * after each bound, assuming created_at grows with seq. It does not quite (created_at
 * is the writing transaction's start, seq is taken at the insert), so the page never
 * relies on it for exactness, only to tell the planner where the range mostly lies.
 */
async function lookUp(db: Queryable, options: BrowseOptions): Promise<LookUp> {
  const glob = options.type?.includes("*") ? options.type : undefined;
  if (!glob && !options.from && !options.to) {
    return options.type ? { types: [options.type] } : {};
  }
  const s = new Statement();
  const parts: string[] = [];
  const ctes: string[] = [];
  if (glob) {
    ctes.push(`types(type) AS (
        SELECT min(type) FROM events_browse
        UNION ALL
        SELECT (SELECT min(type) FROM events_browse WHERE type > t.type) FROM types t WHERE t.type IS NOT NULL)`);
    parts.push(
      `(SELECT coalesce(array_agg(type), '{}') FROM types WHERE type LIKE ${s.bind(globToLike(glob))}) AS types`,
    );
  }
  for (const [name, at] of [
    ["from_seq", options.from],
    ["to_seq", options.to],
  ] as const) {
    if (!at) continue;
    const t = s.bind(at);
    // Invariant (if created_at grew with seq): rows below lo were recorded before t,
    // rows at or above hi at or after it. A missing probe row counts as "after".
    ctes.push(`${name}(lo, hi, n) AS (
        SELECT (SELECT min(seq) FROM events_browse), (SELECT max(seq) + 1 FROM events_browse), 0
        UNION ALL
        SELECT CASE WHEN p.created_at < ${t} THEN p.seq + 1 ELSE b.lo END,
               CASE WHEN p.created_at < ${t} THEN b.hi ELSE (b.lo + b.hi) / 2 END, b.n + 1
          FROM ${name} b
          LEFT JOIN LATERAL (SELECT seq, created_at FROM events_browse WHERE seq >= (b.lo + b.hi) / 2
                             ORDER BY seq LIMIT 1) p ON true
         WHERE b.lo < b.hi AND b.n < 64)`);
    parts.push(`(SELECT min(hi) FROM ${name}) AS ${name}`);
  }
  const { rows } = await query<{ types?: string[]; from_seq?: string | null; to_seq?: string | null }>(
    db,
    `WITH RECURSIVE ${ctes.join(",\n")} SELECT ${parts.join(", ")}`,
    s.values,
  );
  const row = rows[0]!;
  const seq = (v: string | null | undefined) => (v === null || v === undefined ? undefined : Number(v));
  return {
    ...(glob ? { types: row.types ?? [] } : options.type ? { types: [options.type] } : {}),
    ...(seq(row.from_seq) !== undefined ? { fromSeq: seq(row.from_seq) } : {}),
    ...(seq(row.to_seq) !== undefined ? { toSeq: seq(row.to_seq) } : {}),
  };
}

/**
 * A page under a time range, as three seq bands that partition everything below
 * the cursor: [lo, hi) where the look-up says the range lies, walked by the primary
 * key in seq order with all the filters (the planner estimates it right, because it
 * is a seq range); and the bands above and below it, which hold only the rows whose
 * created_at is out of seq order (a long transaction's), if any. Those two ask for
 * `seq + 0`, which the primary key cannot serve, so only the BRIN index on
 * (seq + 0, created_at) can, skipping every block range whose rows were recorded
 * outside the time range: a few blocks at the band's edge instead of a walk over
 * every row newer (or older) than the range. Materialised, so they are computed
 * once and never walked in seq order.
 */
function timeRangePage(
  s: Statement,
  filter: { own: string[]; keys: string[] },
  take: string,
  at: { fromSeq?: number; toSeq?: number; before?: number },
): string {
  const top = at.before;
  const hi = Math.min(at.toSeq ?? Infinity, top ?? Infinity);
  const lo = Math.min(at.fromSeq ?? -Infinity, hi);
  const bands: string[] = [];
  const ctes: string[] = [];
  // An outer band's keys first, then its rows by primary-key look-ups (`= ANY
  // (ARRAY(...))`): as a join, the planner, which estimates the BRIN scan at a fifth
  // of the table, hashed a scan of all of events for the three rows it found
  // (608 ms for "before 100 days ago" at a million events).
  const outer = (bound: string) =>
    `SELECT ${PAGE_COLUMNS} FROM events e
      WHERE ${[`e.seq = ANY (ARRAY(SELECT b.seq FROM events_browse b WHERE ${[...filter.keys, bound].join(" AND ")}))`, ...filter.own].join(" AND ")}`;
  if (at.toSeq !== undefined && (top === undefined || at.toSeq < top)) {
    const bound = `b.seq + 0 >= ${s.bind(at.toSeq)}${top !== undefined ? ` AND b.seq + 0 < ${s.bind(top)}` : ""}`;
    ctes.push(`above AS MATERIALIZED (${outer(bound)})`);
    bands.push(`SELECT * FROM above`);
  }
  const bounds = [
    ...(Number.isFinite(lo) ? [bothSeqs(">=", s.bind(lo))] : []),
    ...(Number.isFinite(hi) ? [bothSeqs("<", s.bind(hi))] : []),
  ];
  bands.push(`(SELECT ${PAGE_COLUMNS} FROM ${PAGE_SOURCE} WHERE ${[...filter.own, ...filter.keys, ...bounds].join(" AND ")}
              ORDER BY b.seq DESC LIMIT ${take})`);
  if (Number.isFinite(lo)) {
    ctes.push(`below AS MATERIALIZED (${outer(`b.seq + 0 < ${s.bind(lo)}`)})`);
    bands.push(`SELECT * FROM below`);
  }
  return `${ctes.length ? `WITH ${ctes.join(", ")}` : ""}
          SELECT * FROM (${bands.join(" UNION ALL ")}) page ORDER BY seq DESC LIMIT ${take}`;
}

/**
 * One page of events, newest first, without its cursor, on the same index-backed
 * statements as the dashboard's page (a type glob, a subject or a scope found
 * through events_browse, not by scanning). The admin route and the CLI page with
 * browseEvents itself, for its cursor.
 */
export async function listEvents(db: Queryable, options: BrowseOptions = {}): Promise<EventRow[]> {
  return (await browseEvents(db, options)).events;
}
