import { nowSql, positiveInt, results, send, type SqlClient } from "../sql.ts";
import type { ClaimedEvent } from "../types.ts";
import { dueSql } from "../state.ts";

export interface RelayState {
  /** Consecutive failed passes; non-zero means the next pass is a `rows` pass. */
  failures: number;
  backoffUntil: Date | null;
  backedOff: boolean;
}

export interface Claim {
  state: RelayState;
  events: ClaimedEvent[];
  /**
   * The transaction's time as the database holds it: what the pass's mark writes
   * to fanned_out_at (`now()` is fixed for a transaction). Null when the relay's
   * state row is missing.
   */
  at: Date | null;
}

interface DbClaimState {
  failures: number;
  backoff_until: Date | null;
  backed_off: boolean;
  at: Date;
}

/**
 * Opens the pass's transaction and claims its rows in one round trip.
 *
 * Never a cursor: the predicate is the row's own state, so a row whose transaction
 * committed after a later seq was fanned is still claimed (guarantee 3). The
 * partial index on seq WHERE fanned_out_at IS NULL AND poisoned_at IS NULL keeps
 * this independent of how many fanned rows history holds. SKIP LOCKED lets any
 * number of passes run at once without a leader: each row is locked by at most one.
 * While the relay is backed off the claim returns nothing, so every caller (kick,
 * sweep, CLI) respects the backoff without reading it first.
 *
 * Simple-query protocol (no parameters) is what lets BEGIN travel with the claim;
 * every interpolated value is a number or an ISO timestamp built here.
 */
export async function claim(client: SqlClient, limit: number, now: Date | undefined): Promise<Claim> {
  return readClaim(await send(client, claimText(limit, now)));
}

/**
 * The claim's statements as one text, `BEGIN` first: sent alone by claim(), or after
 * a pass's COMMIT in the same round trip when a drain goes on (ADR 0022).
 */
export function claimText(limit: number, now: Date | undefined): string {
  const NOW = nowSql(now);
  return `
    BEGIN;
    SELECT failures, backoff_until, coalesce(backoff_until > ${NOW}, false) AS backed_off, ${NOW} AS at
      FROM outbox_relay_state WHERE id = 1;
    ${claimSql(limit, now)};`;
}

/** What claimText's three statements answered, in order (BEGIN, state, claim). */
export function readClaim(raw: unknown): Claim {
  const [, stateResult, claimResult] = results<[never, DbClaimState, DbClaimedRow]>(raw);
  const s = stateResult?.rows[0];
  const state: RelayState = s
    ? { failures: s.failures, backoffUntil: s.backoff_until, backedOff: s.backed_off }
    : // A database migrated without the seed row behaves as never failed.
      { failures: 0, backoffUntil: null, backedOff: false };
  const events = (claimResult?.rows ?? []).map(claimedFromRow);
  return { state, events, at: s?.at ?? null };
}

/** The claim reads each event as the JSON text of its job bodies: see ClaimedRow. */
interface DbClaimedRow {
  seq: string;
  id: string;
  type: string;
  subject: string;
  scope: string | null;
  attempts: number;
  event_json: string;
}

/**
 * A claimed event carries `eventJson`, the event's part of every job body, made by
 * Postgres in the claim (see claimSql): job bodies embed it as is (plan.ts), so the
 * relay neither builds it nor parses a date or the payload. `payload` and
 * `createdAt` are read from it, once, only if a subscription's filter asks. A class,
 * so every claimed event has one shape and the getters live on the prototype.
 */
class ClaimedRow implements ClaimedEvent {
  readonly seq: number;
  readonly id: string;
  readonly type: string;
  readonly subject: string;
  readonly scope: string | null;
  readonly eventJson: string;
  readonly attempts: number;
  #parsed: { payload: unknown; createdAt: string } | undefined;

  constructor(r: DbClaimedRow) {
    this.seq = Number(r.seq);
    this.id = r.id;
    this.type = r.type;
    this.subject = r.subject;
    this.scope = r.scope;
    this.eventJson = r.event_json;
    this.attempts = r.attempts;
  }

  get payload(): unknown {
    return this.#event().payload;
  }

  get createdAt(): Date {
    return new Date(this.#event().createdAt);
  }

  #event(): { payload: unknown; createdAt: string } {
    return (this.#parsed ??= JSON.parse(this.eventJson) as { payload: unknown; createdAt: string });
  }
}

function claimedFromRow(r: DbClaimedRow): ClaimedEvent {
  return new ClaimedRow(r);
}

/**
 * The event as it appears in every job body (JobBody.event, keys in its order), as
 * text. createdAt is formatted as Date.prototype.toISOString formats it: UTC,
 * milliseconds truncated from the stored microseconds, as pg's parser truncates them.
 * Concatenated rather than json_build_object(...)::text, which works out each
 * argument's type again for every row: the claim's backend CPU fell from 1.81 to
 * 1.63 ms per 200 events (docs/adr/0016). The text values are escaped by to_json
 * (the escaping json_build_object uses), the payload is jsonb's own output, and id
 * (a uuid) and seq (an integer) need none. The JSON is compact, so a job body is
 * ~30 bytes shorter than json_build_object's spaced output; the values are the same.
 */
export const EVENT_JSON_SQL = `'{"id":"' || id || '","seq":' || seq || ',"type":' || to_json(type)
         || ',"subject":' || to_json(subject) || ',"scope":' || coalesce(to_json(scope)::text, 'null')
         || ',"payload":' || payload
         || ',"createdAt":"' || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"}'`;

/**
 * Whether the row is free of another transaction that is still running: the rows
 * other passes hold, left out before they reach the row lock (ADR 0024). SKIP LOCKED
 * alone skips them too, but only after asking the lock manager for each one (the
 * tuple's lock, then the holder's transaction lock), about 5 µs a row here: with
 * three other relays holding 200 rows each at the head of the queue, a claim took
 * 4.0 ms instead of 1.1, and Postgres's CPU per pass rose by half (docs/performance.md,
 * issue 11, seventh round). This test is a snapshot lookup instead.
 *
 * `xmax` names the transaction that last locked or updated the row version (0: none).
 * When that transaction is visible in the statement's snapshot it has ended
 * (committed, rolled back, or died with its connection: a crashed pass's rows pass
 * and are locked as before); when it is not, it is running or ended while this
 * statement ran, and the row is left for the next claim, whose snapshot is newer.
 * So this changes only how held rows are skipped, never which rows a claim may take.
 * xmax is a 32-bit xid and snapshots hold 64-bit ones: the xid is placed in the
 * epoch nearest the snapshot's xmin (xids in use are within 2^31 of it). Only the
 * relay's own FOR UPDATE ever locks an `events` row (no foreign key references the
 * table, test/outbox/claim-held-rows.test.ts), so xmax is never a MultiXactId.
 */
const FREE_OF_RUNNING_HOLDER_SQL = `(xmax = 0 OR pg_visible_in_snapshot(
         ${fullXidSql("xmax::text::bigint", "(SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint)")},
         (SELECT pg_current_snapshot())))`;

/**
 * A 32-bit xid as the 64-bit one (xid8) nearest a known 64-bit xid: `xid32` and
 * `near64` are SQL bigint expressions. The difference of the low 32 bits is read as
 * a signed 32-bit number, so an xid just past an epoch boundary lands in the next
 * epoch and one just before it in the previous. Exported for its test.
 */
export function fullXidSql(xid32: string, near64: string): string {
  return `greatest(0, ${near64} + (${xid32} - ${near64} % 4294967296 + 6442450944) % 4294967296 - 2147483648)::text::xid8`;
}

/** The claim itself; exported so tests and the benchmark examine exactly what the relay runs. */
export function claimSql(limit: number, now: Date | undefined): string {
  const NOW = nowSql(now);
  return `SELECT seq, id, type, subject, scope, attempts, ${EVENT_JSON_SQL} AS event_json
      FROM events
     WHERE ${dueSql(NOW)}
       AND NOT EXISTS (SELECT 1 FROM outbox_relay_state WHERE backoff_until > ${NOW})
       AND ${FREE_OF_RUNNING_HOLDER_SQL}
     ORDER BY seq
     LIMIT ${positiveInt(limit, "limit")}
       FOR UPDATE SKIP LOCKED`;
}
