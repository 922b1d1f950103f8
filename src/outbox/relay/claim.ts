import { nowSql, positiveInt, results, type SqlClient } from "../sql.ts";
import type { ClaimedEvent, DbClaimedEvent } from "../types.ts";
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
  const NOW = nowSql(now);
  const raw = await client.query(`
    BEGIN;
    SELECT failures, backoff_until, coalesce(backoff_until > ${NOW}, false) AS backed_off, ${NOW} AS at
      FROM outbox_relay_state WHERE id = 1;
    ${claimSql(limit, now)};`);
  const [, stateResult, claimResult] = results<[never, DbClaimState, DbClaimedRow]>(raw);
  const s = stateResult?.rows[0];
  const state: RelayState = s
    ? { failures: s.failures, backoffUntil: s.backoff_until, backedOff: s.backed_off }
    : // A database migrated without the seed row behaves as never failed.
      { failures: 0, backoffUntil: null, backedOff: false };
  const events = (claimResult?.rows ?? []).map(claimedFromRow);
  return { state, events, at: s?.at ?? null };
}

/** The claim reads the payload as text: see claimedFromRow. */
type DbClaimedRow = Omit<DbClaimedEvent, "payload"> & { payload_json: string };

/**
 * The payload stays the text Postgres sent: job bodies embed it as is (plan.ts),
 * and it is parsed, once, only if a subscription's filter reads `payload`. A class,
 * so every claimed event has one shape and the getter lives on the prototype.
 */
class ClaimedRow implements ClaimedEvent {
  readonly seq: number;
  readonly id: string;
  readonly type: string;
  readonly subject: string;
  readonly scope: string | null;
  readonly payloadJson: string;
  readonly createdAt: Date;
  readonly attempts: number;
  #payload: unknown = undefined;
  #parsed = false;

  constructor(r: DbClaimedRow) {
    this.seq = Number(r.seq);
    this.id = r.id;
    this.type = r.type;
    this.subject = r.subject;
    this.scope = r.scope;
    this.payloadJson = r.payload_json;
    this.createdAt = r.created_at;
    this.attempts = r.attempts;
  }

  get payload(): unknown {
    if (!this.#parsed) {
      this.#payload = JSON.parse(this.payloadJson);
      this.#parsed = true;
    }
    return this.#payload;
  }
}

function claimedFromRow(r: DbClaimedRow): ClaimedEvent {
  return new ClaimedRow(r);
}

/** The claim itself; exported so tests and the benchmark examine exactly what the relay runs. */
export function claimSql(limit: number, now: Date | undefined): string {
  const NOW = nowSql(now);
  return `SELECT seq, id, type, subject, scope, payload::text AS payload_json, created_at, attempts
      FROM events
     WHERE ${dueSql(NOW)}
       AND NOT EXISTS (SELECT 1 FROM outbox_relay_state WHERE backoff_until > ${NOW})
     ORDER BY seq
     LIMIT ${positiveInt(limit, "limit")}
       FOR UPDATE SKIP LOCKED`;
}
