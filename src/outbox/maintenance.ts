import { query, type Queryable } from "./sql.ts";
import { STATE_SQL, dueSql } from "./state.ts";

export interface RetentionOptions {
  /** Fanned events older than this are deleted. */
  olderThanDays: number;
  /** Rows per DELETE: bounds each statement's locks and WAL. */
  batchSize?: number;
  /**
   * Stop after this many batches; the next sweep continues. Unset: as many as fit
   * in RETENTION_BUDGET_MS (a sweep has a time budget).
   */
  maxBatches?: number;
  now?: Date;
}

/**
 * How long one sweep goes on deleting one table's old rows, a batch after another.
 * A fixed ten batches a sweep (10,000 events, or 5,000 rows of the app's tables, a
 * minute) was outrun by the write rates the bench measures: a table grew without
 * bound while each sweep said it deleted its ten batches. Time, not a count, is what
 * a sweep has to share; at the tens of milliseconds a batch takes, 2 s is tens of
 * thousands of rows a minute.
 */
export const RETENTION_BUDGET_MS = 2_000;

/** A batch count no budget goes past, whatever the clock says. */
const MAX_RETENTION_BATCHES = 1_000;

/**
 * Whether a retention loop that has done `batch` batches since `started` goes on:
 * up to `maxBatches` when given, else while RETENTION_BUDGET_MS lasts.
 */
export function moreRetentionBatches(batch: number, started: number, maxBatches?: number): boolean {
  return maxBatches === undefined
    ? batch < MAX_RETENTION_BATCHES && Date.now() - started < RETENTION_BUDGET_MS
    : batch < maxBatches;
}

/**
 * What a lookup of an event by id that finds none adds: job failures, deliveries and
 * alerts keep naming an event after retention deleted it, and their links led to a
 * bare "not found" that read like a wrong id.
 */
export const EVENT_GONE_HINT =
  "not recorded, or deleted by the cron sweep once fanned out more than RETENTION_DAYS ago " +
  "(job failures, webhook deliveries and alerts may still name it)";

/**
 * Deletes old fanned events in bounded batches, oldest recorded first. Pending and
 * poisoned rows are never deleted, whatever their age: they are work not done.
 *
 * There is no index on fanned rows (the relay's mark would add an entry to it for
 * every event it fans out, ADRs 0014 and 0016), so old fanned rows are found on the primary
 * key. A row fanned before the cutoff was recorded before it too, and seq follows
 * recording order closely (it is assigned at insert, created_at at the start of the
 * writer's transaction), so the rows to delete sit below the last seq recorded
 * before the cutoff. A binary search on the primary key finds that seq (one index
 * probe per step), and each batch walks the key from where the previous one stopped
 * up to it. The filter alone decides what is deleted; the bound only keeps a sweep
 * from walking young rows. A row the bound misses (recorded before the cutoff by a
 * transaction that inserted it after younger rows) goes in a later sweep, once the
 * cutoff has passed the rows around it. Each sweep walks past the pending and
 * poisoned rows older than the cutoff, one heap fetch each.
 */
export async function deleteOldFannedEvents(db: Queryable, options: RetentionOptions): Promise<number> {
  const batchSize = options.batchSize ?? 1000;
  if (!(options.olderThanDays > 0)) throw new RangeError("olderThanDays must be positive");
  const cutoff = new Date((options.now?.getTime() ?? Date.now()) - options.olderThanDays * 86_400_000);
  // The overview's per-minute fanned counts go at the same age as the events they
  // counted (at most 16 rows a minute, so one statement). The events' keys in
  // events_browse go with each DELETE below, by the table's trigger (migration 0010).
  await query(db, `DELETE FROM outbox_fanned_minutes WHERE minute < $1`, [cutoff]);
  const { rows: found } = await query<{ bound: string | null }>(db, lastSeqRecordedBeforeSql, [cutoff]);
  const bound = found[0]?.bound;
  if (bound == null) return 0;
  let deleted = 0;
  let after = "0";
  const started = Date.now();
  for (let i = 0; moreRetentionBatches(i, started, options.maxBatches); i++) {
    const { rows } = await query<{ n: number; last: string | null }>(db, retentionBatchSql, [
      after,
      bound,
      cutoff,
      batchSize,
    ]);
    const n = rows[0]?.n ?? 0;
    deleted += n;
    if (n < batchSize || !rows[0]?.last) break;
    after = rows[0].last;
  }
  return deleted;
}

/**
 * One batch: fanned before $3, seq in ($1, $2], at most $4 rows, on the primary key.
 * int8 travels as text both ways, so a seq never passes through a JS number here.
 * \`= ANY (ARRAY(...))\`, not \`IN (...)\`: the rows are then deleted by primary-key
 * lookups, never by a join the planner may choose to feed from a scan of the table.
 * Exported so a test can check its plan.
 */
export const retentionBatchSql = `
  WITH gone AS (
    DELETE FROM events WHERE seq = ANY (ARRAY(
      SELECT seq FROM events
       WHERE seq > $1::int8 AND seq <= $2::int8
         AND ${STATE_SQL.fanned} AND fanned_out_at < $3
       ORDER BY seq
       LIMIT $4
    ))
    RETURNING seq
  )
  SELECT count(*)::int AS n, max(seq)::text AS last FROM gone`;

/**
 * The largest seq whose row was recorded before $1, searched on the primary key:
 * [lo, hi] narrows until they are neighbours, lo always a row recorded before the
 * cutoff (or below every row), the first row from hi on recorded after it (or none).
 * Each step reads the first row at or after the midpoint. NULL when no row is old.
 */
const lastSeqRecordedBeforeSql = `
  WITH RECURSIVE search(lo, hi) AS (
    SELECT min(seq) - 1, max(seq) + 1 FROM events
    UNION ALL
    SELECT CASE WHEN p.old THEN p.seq ELSE s.lo END,
           CASE WHEN p.old THEN s.hi ELSE (s.lo + s.hi) / 2 END
      FROM search s
      LEFT JOIN LATERAL (
        SELECT seq, seq < s.hi AND created_at < $1 AS old FROM events
         WHERE seq >= (s.lo + s.hi) / 2 ORDER BY seq LIMIT 1
      ) p ON true
     WHERE s.hi - s.lo > 1
  )
  SELECT nullif(max(lo), (SELECT min(seq) - 1 FROM events))::text AS bound FROM search`;

export interface AlertThresholds {
  /** The oldest due event has waited this long. */
  maxPendingAgeSeconds?: number;
  /** This many passes in a row have failed. */
  maxRelayFailures?: number;
}

/**
 * Raises alerts about the relay as a whole (poisoned rows raise their own as they
 * are poisoned). One open alert per kind: a condition that persists does not
 * flood the table, and one that cleared resolves its alert. NOT EXISTS alone
 * cannot promise that: two overlapping sweeps each see the other's new alert as
 * uncommitted and both insert. The unique partial index on open `relay.*` kinds
 * (migration 0004) decides; ON CONFLICT makes the loser wait for the winner and
 * then insert nothing, instead of failing its sweep with a unique violation.
 */
export async function evaluateAlerts(db: Queryable, thresholds: AlertThresholds = {}): Promise<string[]> {
  const maxAge = thresholds.maxPendingAgeSeconds ?? 300;
  const maxFailures = thresholds.maxRelayFailures ?? 5;
  const { rows } = await query<{ kind: string }>(
    db,
    `WITH facts AS (
       SELECT
         (SELECT extract(epoch FROM now() - min(created_at)) FROM events
           WHERE ${dueSql("now()")}) AS oldest_due,
         s.failures, s.last_error
       FROM outbox_relay_state s WHERE s.id = 1
     ), conditions AS (
       SELECT 'relay.lagging' AS kind, coalesce(oldest_due > $1, false) AS firing,
              -- With where to look and what sends them now, as relay.failing names its fix.
              format('oldest due event has waited %s s (threshold %s s). \`stats\` (the operator CLI) says whether '
                     'the relay is backed off and when the sweep last ran; \`relay drain\` sends what waits now',
                     round(oldest_due), $1::int) AS message,
              format('caught up: no due event has waited over %s s', $1::int) AS over
         FROM facts
       UNION ALL
       SELECT 'relay.failing', failures >= $2,
              -- With what ends it sooner than the backoff: a walkthrough's operator tried
              -- \`relay once\`, which only said it was backed off.
              format('%s relay passes failed in a row; last error: %s. It tries again as its backoff ends; '
                     'once the cause is fixed, \`relay drain --now\` (the operator CLI) ends the backoff and '
                     'sends what waits', failures, last_error),
              'recovered: a relay pass succeeded'
         FROM facts
     ), raised AS (
       INSERT INTO outbox_alerts (kind, message)
       SELECT c.kind, c.message FROM conditions c
        WHERE c.firing
          AND NOT EXISTS (SELECT 1 FROM outbox_alerts a WHERE a.kind = c.kind AND a.resolved_at IS NULL)
       ON CONFLICT (kind) WHERE resolved_at IS NULL AND kind LIKE 'relay.%' DO NOTHING
       RETURNING kind
     ), updated AS (
       -- An open alert says how things stand now: it stayed at its first words ("5 relay
       -- passes failed") while stats counted 10 (the outage walkthrough).
       UPDATE outbox_alerts a SET message = c.message
         FROM conditions c
        WHERE a.kind = c.kind AND c.firing AND a.resolved_at IS NULL AND a.message IS DISTINCT FROM c.message
       RETURNING a.kind
     ), cleared AS (
       -- Resolved saying so, with what it said last: it resolved in silence, its message
       -- still reading as a failure, where the other alerts of a condition say why they ended.
       UPDATE outbox_alerts a SET resolved_at = now(), message = c.over || ' (it said: ' || a.message || ')'
         FROM conditions c
        WHERE a.kind = c.kind AND NOT c.firing AND a.resolved_at IS NULL
       RETURNING a.kind
     )
     SELECT kind FROM raised`,
    [maxAge, maxFailures],
  );
  return rows.map((r) => r.kind);
}

export interface VacuumOptions {
  /** Never vacuum for fewer dead row versions than this. */
  minDeadTuples?: number;
  /** ... nor for fewer than this share of the live rows (autovacuum's scale factor, tighter). */
  deadRatio?: number;
}

export interface VacuumResult {
  deadTuples: number;
  vacuumed: boolean;
}

/**
 * Every mark is a non-HOT update, so a drain leaves one dead row version and one
 * dead entry at the head of the claim's partial index per event. Autovacuum may be
 * off, lagging or napping for a minute — longer than a big drain — and the claim
 * then walks the dead entries on every pass. The sweep vacuums `events` itself
 * once enough is dead. SKIP_LOCKED: an overlapping sweep's VACUUM (or
 * autovacuum) already holds the lock and does the same work, so do not queue
 * behind it. VACUUM cannot run in a transaction block: `db` must run it as a
 * plain statement (a pool's query, as the Neon driver does).
 */
export async function vacuumEventsIfNeeded(
  db: Queryable,
  options: VacuumOptions = {},
): Promise<VacuumResult> {
  const minDead = options.minDeadTuples ?? 10_000;
  const ratio = options.deadRatio ?? 0.1;
  const { rows } = await query<{ dead: number; live: number }>(
    db,
    `SELECT n_dead_tup::float8 AS dead, n_live_tup::float8 AS live
       FROM pg_stat_user_tables WHERE relid = 'events'::regclass`,
  );
  const dead = rows[0]?.dead ?? 0;
  const live = rows[0]?.live ?? 0;
  if (dead < minDead || dead < ratio * live) return { deadTuples: dead, vacuumed: false };
  await db.query(`VACUUM (SKIP_LOCKED) events`);
  return { deadTuples: dead, vacuumed: true };
}
