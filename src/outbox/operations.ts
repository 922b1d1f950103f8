import type { Fanout } from "./schema.ts";
import { eventFromRow, type ClaimedEvent, type DbClaimedEvent } from "./types.ts";
import { InvalidInputError } from "./errors.ts";
import { endBackoffSql } from "./relay/backoff.ts";
import { keysetPage, query, type Queryable } from "./sql.ts";
import { STATE_SQL, dueSql, idsSql, stateOf, type EventState } from "./state.ts";

/** An event as operators see it: what the relay claims, plus where it stands. */
export interface EventRow extends ClaimedEvent {
  fannedOutAt: Date | null;
  fanout: Fanout | null;
  lastError: string | null;
  nextAttemptAt: Date | null;
  poisonedAt: Date | null;
  state: EventState;
}

/** An event id as text (any case), as a regex source: route patterns use it too. */
export const UUID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

/**
 * The id of a bigint identity row (an alert, a job failure) as text a route or an
 * operator gives: digits, at most 15, so it is exact as a JS number. A regex source.
 */
export const IDENTITY_ID_DIGITS = "[1-9][0-9]{0,14}";
const UUID = new RegExp(`^${UUID_PATTERN}$`);

/** Whether `text` is a UUID (any version), as ids are checked before a query. */
export const isUuid = (text: string): boolean => UUID.test(text);

export function assertEventId(id: string): void {
  if (!isUuid(id)) throw new InvalidInputError(`"${id}" is not an event id (a UUID)`);
}

/** An events row as the drivers return it. */
export interface DbEvent extends DbClaimedEvent {
  fanned_out_at: Date | null;
  fanout: Fanout | null;
  last_error: string | null;
  next_attempt_at: Date | null;
  poisoned_at: Date | null;
}

export const COLUMNS = `seq, id, type, subject, scope, payload, created_at, fanned_out_at, fanout, attempts,
  last_error, next_attempt_at, poisoned_at`;

export function toEvent(r: DbEvent): EventRow {
  return {
    ...eventFromRow(r),
    fannedOutAt: r.fanned_out_at,
    fanout: r.fanout,
    lastError: r.last_error,
    nextAttemptAt: r.next_attempt_at,
    poisonedAt: r.poisoned_at,
    state: stateOf({ fannedOutAt: r.fanned_out_at, poisonedAt: r.poisoned_at }),
  };
}

/** `supplier.*` → `supplier.%`, with LIKE's own wildcards taken literally. */
export function globToLike(glob: string): string {
  return glob.replace(/[\\%_]/g, "\\$&").replace(/\*/g, "%");
}

/** The most events one listing returns. */
export const MAX_LIST_LIMIT = 10_000;

export interface AlertRow {
  id: number;
  kind: string;
  eventId: string | null;
  subscription: string | null;
  message: string;
  details: unknown;
  createdAt: Date;
  resolvedAt: Date | null;
}

/**
 * The alert an upgrade merged this one into (migrations 0016 and 0023 resolved all but
 * one open alert of an endpoint or a subscription, naming the one that counts them in
 * `details.mergedInto`), or undefined: shown as a plain "resolved", a walkthrough read
 * them as resolved by an operator.
 */
export function mergedInto(alert: Pick<AlertRow, "details">): number | undefined {
  const into: unknown =
    alert.details !== null && typeof alert.details === "object"
      ? Reflect.get(alert.details, "mergedInto")
      : undefined;
  return typeof into === "number" || (typeof into === "string" && /^\d+$/.test(into))
    ? Number(into)
    : undefined;
}

/** ", merged into alert 8 by an upgrade" after a resolved alert's time, or "": every view says it alike. */
export function mergedText(alert: Pick<AlertRow, "details">): string {
  const into = mergedInto(alert);
  return into === undefined ? "" : `, merged into alert ${into} by an upgrade`;
}

/** An outbox_alerts row as the drivers return it. */
interface DbAlert {
  /** bigint: the drivers return int8 as a string. */
  id: string;
  kind: string;
  event_id: string | null;
  subscription: string | null;
  message: string;
  details: unknown;
  created_at: Date;
  resolved_at: Date | null;
}

function toAlert(r: DbAlert): AlertRow {
  return {
    id: Number(r.id),
    kind: r.kind,
    eventId: r.event_id,
    subscription: r.subscription,
    message: r.message,
    details: r.details,
    createdAt: r.created_at,
    resolvedAt: r.resolved_at,
  };
}

/**
 * One event of `scope` (null: of no scope), as a tenant may see it: another
 * scope's is null, as a missing one is, found by the same one statement so the
 * two take the same time (reading its alerts only when it was there told them apart).
 */
export async function getScopedEvent(
  db: Queryable,
  id: string,
  scope: string | null,
): Promise<EventRow | null> {
  const row = await eventRow(db, id, scope);
  return row ? toEvent(row) : null;
}

async function eventRow(db: Queryable, id: string, scope?: string | null): Promise<DbEvent | undefined> {
  assertEventId(id);
  const inScope = scope === undefined ? "" : scope === null ? " AND scope IS NULL" : " AND scope = $2";
  const params = scope === undefined || scope === null ? [id] : [id, scope];
  return (
    await query<DbEvent>(db, `SELECT ${COLUMNS} FROM events WHERE ${idsSql("ARRAY[$1]")}${inScope}`, params)
  ).rows[0];
}

/** One event with its alerts, for operators. */
export async function getEvent(
  db: Queryable,
  id: string,
): Promise<(EventRow & { alerts: AlertRow[] }) | null> {
  const row = await eventRow(db, id);
  if (!row) return null;
  const alerts = await query<DbAlert>(db, `SELECT * FROM outbox_alerts WHERE event_id = $1 ORDER BY id`, [
    id,
  ]);
  return { ...toEvent(row), alerts: alerts.rows.map(toAlert) };
}

export interface AlertListOptions {
  /** Only alerts not resolved yet. */
  open?: boolean;
  /** Keyset cursor: only alerts with a smaller id (the previous page's last). */
  before?: number;
  limit?: number;
}

/** Newest first. */
export async function listAlerts(db: Queryable, options: AlertListOptions = {}): Promise<AlertRow[]> {
  const values: unknown[] = [options.limit ?? 50];
  const where: string[] = [];
  if (options.open) where.push("resolved_at IS NULL");
  if (options.before !== undefined) where.push(`id < $${values.push(options.before)}`);
  const { rows } = await query<DbAlert>(
    db,
    `SELECT * FROM outbox_alerts ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT $1`,
    values,
  );
  return rows.map(toAlert);
}

export interface AlertPage {
  alerts: AlertRow[];
  /** The cursor for the next (older) page, or null when this is the last. */
  nextBefore: number | null;
}

/** listAlerts a page at a time, with the cursor of the next: the admin route's and the CLI's. */
export async function alertsPage(db: Queryable, options: AlertListOptions = {}): Promise<AlertPage> {
  const limit = options.limit ?? 50;
  const found = await listAlerts(db, { ...options, limit: limit + 1 });
  const { rows: alerts, nextBefore } = keysetPage(found, limit, (a) => a.id);
  return { alerts, nextBefore };
}

export interface RequeueResult {
  requeued: string[];
  /** Known events that were not poisoned: left as they are. */
  notPoisoned: string[];
  unknown: string[];
}

/**
 * Puts poisoned events back in line with a fresh set of attempts, and resolves
 * their types' alerts once none they count is left (settlePoisonedAlerts). Events
 * that are not poisoned are left alone: requeueing a pending row would reset its
 * backoff, and a fanned one would be fanned out twice.
 */
export async function requeue(db: Queryable, ids: string[]): Promise<RequeueResult> {
  ids.forEach(assertEventId);
  const unique = [...new Set(ids.map((id) => id.toLowerCase()))];
  const [row] = (
    await query<{ requeued: string[]; known: string[]; types: string[] }>(
      db,
      `WITH ${requeueing(idsSql("$1"))}
     SELECT (SELECT coalesce(jsonb_agg(id), '[]') FROM requeued) AS requeued,
            (SELECT coalesce(jsonb_agg(id), '[]') FROM events_browse WHERE id = ANY($1::uuid[])) AS known,
            ${REQUEUED_TYPES} AS types`,
      [unique],
    )
  ).rows;
  await settlePoisonedAlerts(db, row?.types ?? []);
  const requeued = row?.requeued ?? [];
  const known = new Set(row?.known ?? []);
  return {
    requeued,
    notPoisoned: unique.filter((id) => known.has(id) && !requeued.includes(id)),
    unknown: unique.filter((id) => !known.has(id)),
  };
}

/**
 * The requeue itself, as the CTE `requeued` (the ids and types put back), for the
 * events `which` (a predicate on `events`) picks that are poisoned: fresh attempts,
 * no backoff. One home for what "requeue" means; settlePoisonedAlerts follows it.
 */
function requeueing(which: string): string {
  return `requeued AS (
       UPDATE events SET poisoned_at = NULL, attempts = 0, next_attempt_at = NULL
        WHERE ${which} AND ${STATE_SQL.poisoned}
       RETURNING id, type
     )`;
}

/** The distinct types of the `requeued` CTE, as a jsonb array. */
const REQUEUED_TYPES = `(SELECT coalesce(jsonb_agg(DISTINCT type), '[]'::jsonb) FROM requeued)`;

/**
 * Whether event `e` is one that `event.poisoned` alert `a` counts (both SQL aliases):
 * of its type, poisoned since the alert was raised (the mark's time for both, so the
 * first is counted; a time implies poisoned). What a requeue settles by and what an
 * event's views show as counting it (openAlertsCountingEvent).
 */
export function countedByPoisonedAlert(a: string, e: string): string {
  return `${e}.type = ${a}.details->>'type'
      AND ${e}.poisoned_at >= coalesce((${a}.details->>'firstPoisonedAt')::timestamptz, ${a}.created_at)`;
}

/**
 * After a requeue of events of `types`: resolves each type's open `event.poisoned`
 * alert once no event that alert counts (its type's, poisoned since the alert was
 * raised) is still poisoned, as a retry resolves a subscription's job.failed alert
 * (ADR 0044). Requeueing one of forty leaves it open for the others.
 *
 * A statement of its own, after the requeue's: in the requeue's statement, another
 * operator's requeue of the type's other events (uncommitted, or skipped as locked)
 * looked poisoned, and two at once each left the alert open for the other. This one
 * runs once its own requeue is visible, so of two, the later sees both. A relay
 * that poisons another event of the type after this snapshot folds it into the
 * alert, changing its details; the alert is resolved only if its details are still
 * those the snapshot read (a fold that committed first, or that holds the row until
 * it does, fails the re-check and leaves it open; a later one finds it resolved and
 * raises a new one).
 */
async function settlePoisonedAlerts(db: Queryable, types: string[]): Promise<void> {
  if (types.length === 0) return;
  await query(
    db,
    `WITH answered AS MATERIALIZED (
       SELECT a.id, a.details FROM outbox_alerts a
        WHERE a.kind = 'event.poisoned' AND a.resolved_at IS NULL AND a.details->>'type' = ANY($1::text[])
          AND NOT EXISTS (SELECT 1 FROM events e WHERE ${countedByPoisonedAlert("a", "e")})
     )
     UPDATE outbox_alerts a
        SET resolved_at = now(), message = a.message || '; resolved: every event it counted was requeued',
            details = a.details || '{"resolvedBy": "requeue"}'::jsonb
       FROM answered
      WHERE a.id = answered.id AND a.details = answered.details AND a.resolved_at IS NULL`,
    [types],
  );
}

/** Poisoned events put back by one call of requeuePoisoned: one statement's worth. */
export const REQUEUE_POISONED_BATCH = 1_000;

export interface RequeuePoisonedOptions {
  /**
   * Only events poisoned at or before this time (timestamptz text, e.g. ISO 8601):
   * the newest poisoning the operator saw. One poisoned again meanwhile (its cause
   * not fixed yet) is not put back unseen, and a loop over the batches ends.
   */
  upTo: string;
  /** Only events whose type matches this glob (`supplier.*`). */
  type?: string;
  limit?: number;
}

/**
 * Events poisoned at or before `upTo` whose type matches the LIKE pattern `like`
 * (NULL: any type), both SQL expressions: what requeuePoisoned takes and
 * countPoisoned counts. `poisoned_at <= …` implies the poisoned index's predicate,
 * so the rows are found there, oldest first, however large the table.
 */
function poisonedMatching(upTo: string, like: string): string {
  return `poisoned_at <= ${upTo} AND (${like}::text IS NULL OR type LIKE ${like})`;
}

const likeOf = (type: string | undefined) => (type === undefined ? null : globToLike(type));

/**
 * After an outage that poisoned events by the thousand (a QStash 400 for a header
 * it would not take is charged to every row): puts back in line, oldest poisoning
 * first, up to `limit` of the events poisoned at or before `upTo`, as `requeue`
 * does for ids. `more` says whether others that match are left for the next call.
 */
export async function requeuePoisoned(
  db: Queryable,
  { upTo, type, limit = REQUEUE_POISONED_BATCH }: RequeuePoisonedOptions,
): Promise<{ requeued: number; more: boolean }> {
  const [row] = (
    await query<{ requeued: number; picked: number; types: string[] }>(
      db,
      // SKIP LOCKED: two operators requeueing at once take different rows instead of
      // one waiting for the other's.
      `WITH picked AS (
       SELECT seq, poisoned_at FROM events
        WHERE ${poisonedMatching("$1::timestamptz", "$3")}
        ORDER BY poisoned_at, seq LIMIT $2 + 1
        FOR UPDATE SKIP LOCKED
     ), ${requeueing("seq IN (SELECT seq FROM picked ORDER BY poisoned_at, seq LIMIT $2)")}
     SELECT (SELECT count(*) FROM requeued)::int AS requeued, (SELECT count(*) FROM picked)::int AS picked,
            ${REQUEUED_TYPES} AS types`,
      [upTo, limit, likeOf(type)],
    )
  ).rows;
  await settlePoisonedAlerts(db, row?.types ?? []);
  return { requeued: row?.requeued ?? 0, more: (row?.picked ?? 0) > limit };
}

/**
 * requeuePoisoned a batch after another until none that match is left, or for at
 * most `maxRounds` batches (a Worker's request bounds its own work), calling
 * `onRound` with the total so far after each batch that leaves more.
 */
export async function requeuePoisonedInRounds(
  db: Queryable,
  options: Omit<RequeuePoisonedOptions, "limit">,
  {
    maxRounds = Number.POSITIVE_INFINITY,
    onRound,
  }: { maxRounds?: number; onRound?: (soFar: number) => void } = {},
): Promise<{ requeued: number; more: boolean }> {
  let requeued = 0;
  let more = false;
  for (let round = 0; round < maxRounds; round++) {
    const result = await requeuePoisoned(db, options);
    requeued += result.requeued;
    more = result.more;
    // Nothing put back although more match: another requeue has them.
    if (!more || result.requeued === 0) break;
    onRound?.(requeued);
  }
  return { requeued, more };
}

/**
 * How many events requeuePoisoned would put back in all, and the time it would
 * take them up to: `upTo` as given, or the database's clock now, as ISO 8601 to
 * the microsecond (a JS Date would drop the last three digits, and a row
 * poisoned in them), the form POST /admin/events/requeue-poisoned takes.
 */
export async function countPoisoned(
  db: Queryable,
  { upTo, type }: { upTo?: string; type?: string } = {},
): Promise<{ upTo: string; count: number }> {
  const [row] = (
    await query<{ up_to: string; n: number }>(
      db,
      `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS up_to)
       SELECT to_char(t.up_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS up_to,
              (SELECT count(*) FROM events WHERE ${poisonedMatching("t.up_to", "$2")})::int AS n
         FROM t`,
      [upTo ?? null, likeOf(type)],
    )
  ).rows;
  return { upTo: row!.up_to, count: row!.n };
}

export interface Stats {
  /** Rows waiting for fan-out (not poisoned). */
  backlog: number;
  /** Of those, how many are due now (not waiting out a row backoff). */
  due: number;
  oldestPendingAgeSeconds: number | null;
  poisoned: number;
  openAlerts: number;
  relay: {
    failures: number;
    backoffUntil: Date | null;
    lastError: string | null;
    lastFailureAt: Date | null;
  };
}

interface DbStats {
  backlog: number;
  due: number;
  oldest: number | null;
  poisoned: number;
  open_alerts: number;
  failures: number;
  backoff_until: Date | null;
  last_error: string | null;
  last_failure_at: Date | null;
}

/** The relay's backoff while it lasts (a pass-level outage), or null when passes may run. */
export async function relayBackoff(
  db: Queryable,
): Promise<{ until: Date; failures: number; lastError: string | null } | null> {
  const { rows } = await query<{ backoff_until: Date; failures: number; last_error: string | null }>(
    db,
    `SELECT backoff_until, failures, last_error FROM outbox_relay_state WHERE id = 1 AND backoff_until > now()`,
  );
  const row = rows[0];
  return row ? { until: row.backoff_until, failures: row.failures, lastError: row.last_error } : null;
}

/** endBackoffSql, run: when the backoff would have ended, or null when there was none. */
export async function endRelayBackoff(db: Queryable): Promise<Date | null> {
  const { rows } = await query<{ was_until: Date }>(db, endBackoffSql());
  return rows[0]?.was_until ?? null;
}

export async function stats(db: Queryable): Promise<Stats> {
  const [row] = (
    await query<DbStats>(
      db,
      `SELECT
       (SELECT count(*) FROM events WHERE ${STATE_SQL.pending})::int AS backlog,
       (SELECT count(*) FROM events WHERE ${dueSql("now()")})::int AS due,
       (SELECT extract(epoch FROM now() - min(created_at)) FROM events
         WHERE ${STATE_SQL.pending})::float8 AS oldest,
       (SELECT count(*) FROM events WHERE ${STATE_SQL.poisoned})::int AS poisoned,
       (SELECT count(*) FROM outbox_alerts WHERE resolved_at IS NULL)::int AS open_alerts,
       s.failures, s.backoff_until, s.last_error, s.last_failure_at
     FROM outbox_relay_state s WHERE s.id = 1`,
    )
  ).rows;
  if (!row) throw new Error("outbox_relay_state has no row: run the migrations");
  return {
    backlog: row.backlog,
    due: row.due,
    oldestPendingAgeSeconds: row.oldest,
    poisoned: row.poisoned,
    openAlerts: row.open_alerts,
    relay: {
      failures: row.failures,
      backoffUntil: row.backoff_until,
      lastError: row.last_error,
      lastFailureAt: row.last_failure_at,
    },
  };
}
