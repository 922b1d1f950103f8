/**
 * The physical limit the relay is compared with: the same claim and mark as ONE
 * plain SQL statement per batch (autocommit), with no publish, no planning and no
 * relay state. It returns the columns the relay reads, so the rows travel to the
 * client as they do for the relay.
 */
export function ceilingSql(batchSize: number, table = "events"): string {
  return `WITH claimed AS (
      SELECT seq FROM ${table}
       WHERE fanned_out_at IS NULL AND poisoned_at IS NULL
         AND (next_attempt_at IS NULL OR next_attempt_at <= now())
       ORDER BY seq
       LIMIT ${batchSize}
         FOR UPDATE SKIP LOCKED
    )
    UPDATE ${table} e SET fanned_out_at = now(), fanout = '{}'::jsonb
      FROM claimed c
     WHERE e.seq = c.seq
    RETURNING e.seq, e.id, e.type, e.subject, e.scope, e.payload, e.created_at, e.attempts`;
}

/** The minimal table of the bare ceiling: today's row shape with a primary key and the claim's partial index only. */
export const BARE_TABLE = "bench_bare_events";

/**
 * Same columns, types, defaults and storage as `events`; of its indexes only the
 * primary key and the claim's partial index on seq, so the mark updates two indexes
 * (one of which the marked row leaves) instead of five.
 */
export function createBareTableSql(eventsReloptions: readonly string[]): string {
  const storage = eventsReloptions.length > 0 ? ` WITH (${eventsReloptions.join(", ")})` : "";
  return `CREATE TABLE IF NOT EXISTS ${BARE_TABLE} (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE)${storage};
          ALTER TABLE ${BARE_TABLE} ADD PRIMARY KEY (seq);
          CREATE INDEX IF NOT EXISTS ${BARE_TABLE}_unfanned_seq_idx ON ${BARE_TABLE} (seq)
           WHERE fanned_out_at IS NULL AND poisoned_at IS NULL;`;
}
