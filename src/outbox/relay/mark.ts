import type { Fanout } from "../schema.ts";
import { literal, nowSql, results, type SqlClient } from "../sql.ts";
import type { DbBackoff } from "./backoff.ts";
import { RELAY_POLICY, backoffSecondsSql } from "./policy.ts";

export interface RowOutcome {
  seq: number;
  /** Set when every job of the row was published (or coalesced into one that was). */
  fanout?: Fanout;
  /** The row's own error; its attempts go up and the 5th poisons it. */
  error?: string;
}

export interface MarkResult {
  fanned: number;
  failed: number;
  poisoned: string[];
  /** The new backoff when `stateSql` recorded a failure; empty when it cleared one. */
  state: DbBackoff[];
}

/**
 * Records the pass's outcome and commits, in one round trip: fanned rows get
 * fanned_out_at and fanout; failed rows get attempts + 1, last_error and a due
 * time (RELAY_POLICY.rowRetry), and the last allowed failure poisons the row
 * and raises an alert in the same statement. `stateSql` settles the relay's
 * backoff in the same transaction.
 *
 * The outcomes travel as one jsonb literal because parameters would force the
 * extended protocol, which allows one statement per round trip.
 */
export async function markAndCommit(
  client: SqlClient,
  outcomes: RowOutcome[],
  stateSql: string,
  now: Date | undefined,
): Promise<MarkResult> {
  const NOW = nowSql(now);
  // A batch where every row published (the usual case) sends only the fanned rows'
  // seq and fanout, and a statement without the failure branch: no per-row error
  // column to read, no second join over the input, no alert insert to plan.
  const anyFailed = outcomes.some((o) => o.error !== undefined);
  const input = literal(
    JSON.stringify(
      anyFailed
        ? outcomes.map((o) => ({ seq: o.seq, fanout: o.fanout ?? null, error: o.error ?? null }))
        : outcomes.map((o) => ({ seq: o.seq, fanout: o.fanout ?? null })),
    ),
  );
  const fannedOnly = `
    WITH fanned AS (
      UPDATE events e
         SET fanned_out_at = ${NOW}, fanout = i.fanout
        FROM jsonb_to_recordset(${input}::jsonb) AS i(seq bigint, fanout jsonb)
       WHERE e.seq = i.seq
      RETURNING e.seq
    )
    SELECT (SELECT count(*) FROM fanned)::int AS fanned, 0 AS failed, '[]'::jsonb AS poisoned;`;
  const withFailures = `
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${input}::jsonb) AS x(seq bigint, fanout jsonb, error text)
    ), fanned AS (
      UPDATE events e
         SET fanned_out_at = ${NOW}, fanout = i.fanout
        FROM input i
       WHERE e.seq = i.seq AND i.error IS NULL
      RETURNING e.seq
    ), failed AS (
      UPDATE events e
         SET attempts = e.attempts + 1,
             last_error = i.error,
             next_attempt_at = ${NOW} + make_interval(secs => ${backoffSecondsSql("e.attempts", RELAY_POLICY.rowRetry)}),
             poisoned_at = CASE WHEN e.attempts + 1 >= ${RELAY_POLICY.poisonAfter} THEN ${NOW} END
        FROM input i
       WHERE e.seq = i.seq AND i.error IS NOT NULL
      RETURNING e.id, e.type, e.attempts, e.poisoned_at, e.last_error
    ), alerted AS (
      INSERT INTO outbox_alerts (kind, event_id, message, details)
      SELECT 'event.poisoned', f.id,
             format('event %s (%s) poisoned after %s failures: %s', f.id, f.type, f.attempts, f.last_error),
             jsonb_build_object('type', f.type, 'attempts', f.attempts, 'lastError', f.last_error)
        FROM failed f
       WHERE f.poisoned_at IS NOT NULL
      RETURNING event_id
    )
    SELECT (SELECT count(*) FROM fanned)::int AS fanned,
           (SELECT count(*) FROM failed)::int AS failed,
           coalesce((SELECT jsonb_agg(event_id) FROM alerted), '[]'::jsonb) AS poisoned;`;
  const raw = await client.query(`${anyFailed ? withFailures : fannedOnly}
    ${stateSql};
    COMMIT;`);
  const [counts, state] = results<[{ fanned: number; failed: number; poisoned: string[] }, DbBackoff]>(raw);
  const row = counts?.rows[0];
  return {
    state: state?.rows ?? [],
    fanned: row?.fanned ?? 0,
    failed: row?.failed ?? 0,
    poisoned: row?.poisoned ?? [],
  };
}
