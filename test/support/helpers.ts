import type pg from "pg";
import type { ClaimedEvent } from "../../src/outbox/index.ts";
import { eventFromRow, type DbClaimedEvent } from "../../src/outbox/types.ts";

/** Every event recorded about a subject, in seq order, read as the relay reads it. */
export async function eventsAbout(
  pool: pg.Pool,
  subject: string,
): Promise<(ClaimedEvent & { payload: Record<string, unknown> })[]> {
  const { rows } = await pool.query<DbClaimedEvent & { payload: Record<string, unknown> }>(
    `SELECT seq, id, type, subject, scope, payload, created_at, attempts
       FROM events WHERE subject = $1 ORDER BY seq`,
    [subject],
  );
  return rows.map((r) => ({ ...eventFromRow(r), payload: r.payload }));
}

/**
 * Polls a condition until it holds: for waiting on a state another connection or
 * process reaches (a lock wait, a received request), never a fixed sleep.
 */
export async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`waitFor: condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Until some backend of `pool`'s database waits on a lock: the statement under test
 * has reached the row another connection holds, so committing that one now
 * interleaves them in the order the test means.
 */
export function untilALockWait(pool: pg.Pool): Promise<void> {
  return waitFor(
    async () =>
      (
        await pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
      ).rows[0]!.n > 0,
  );
}
