/**
 * The physical limit the relay is compared with: the same claim and mark as ONE
 * plain SQL statement per batch (autocommit), with no publish, no planning and no
 * relay state. It returns the columns the relay reads, so the rows travel to the
 * client as they do for the relay.
 */
export function ceilingSql(batchSize: number): string {
  return `WITH claimed AS (
      SELECT seq FROM events
       WHERE fanned_out_at IS NULL AND poisoned_at IS NULL
         AND (next_attempt_at IS NULL OR next_attempt_at <= now())
       ORDER BY seq
       LIMIT ${batchSize}
         FOR UPDATE SKIP LOCKED
    )
    UPDATE events e SET fanned_out_at = now(), fanout = '{}'::jsonb
      FROM claimed c
     WHERE e.seq = c.seq
    RETURNING e.seq, e.id, e.type, e.subject, e.scope, e.payload, e.created_at, e.attempts`;
}
