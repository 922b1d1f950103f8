import type pg from "pg";

export interface EventRow {
  id: string;
  seq: number;
  type: string;
  subject: string;
  scope: string | null;
  payload: Record<string, unknown> & { changed?: string[] };
}

/** Every event recorded about a subject, in seq order. */
export async function eventsAbout(pool: pg.Pool, subject: string): Promise<EventRow[]> {
  const { rows } = await pool.query(
    "SELECT id, seq::int AS seq, type, subject, scope, payload FROM events WHERE subject = $1 ORDER BY seq",
    [subject],
  );
  return rows;
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
