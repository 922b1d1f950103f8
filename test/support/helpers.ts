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
