import type pg from "pg";
import { literal } from "../../src/outbox/sql.ts";
import { poisonedAlertSql } from "../../src/outbox/relay/mark.ts";

export interface SeedOptions {
  type?: string;
  /** Subject per row; `i` is 1-based. Default: one subject per row. */
  subject?: (i: number) => string;
  scope?: string | null;
  fanned?: boolean;
  payloadBytes?: number;
}

/** Inserts n events in one statement; returns their ids in seq order. */
export async function seedEvents(pool: pg.Pool, n: number, options: SeedOptions = {}): Promise<string[]> {
  const type = options.type ?? "test.happened";
  const subjects = Array.from({ length: n }, (_, i) => options.subject?.(i + 1) ?? `subject-${i + 1}`);
  const { rows } = await pool.query<{ id: string }>(
    `INSERT INTO events (type, subject, scope, payload, fanned_out_at, fanout)
     SELECT $1, s.subject, $2, jsonb_build_object('n', s.ord, 'pad', repeat('x', $3::int)),
            CASE WHEN $4 THEN now() END, CASE WHEN $4 THEN '{}'::jsonb END
       FROM unnest($5::text[]) WITH ORDINALITY AS s(subject, ord)
      ORDER BY s.ord
     RETURNING id`,
    [type, options.scope ?? null, options.payloadBytes ?? 0, options.fanned ?? false, subjects],
  );
  return rows.map((r) => r.id);
}

export async function eventStates(pool: pg.Pool) {
  const { rows } = await pool.query<{
    seq: string;
    id: string;
    type: string;
    fanned_out_at: Date | null;
    fanout: Record<string, unknown> | null;
    attempts: number;
    poisoned_at: Date | null;
    last_error: string | null;
    next_attempt_at: Date | null;
  }>(`SELECT * FROM events ORDER BY seq`);
  return rows;
}

export async function unfannedCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM events WHERE fanned_out_at IS NULL`,
  );
  return rows[0]!.n;
}

/**
 * Poisons `ids` as of `at` (timestamptz text) as the relay does after five tries,
 * with the error a QStash 400 leaves, raising or joining their types' open
 * `event.poisoned` alerts with the relay's own statement.
 */
export async function poisonEvents(
  pool: Pick<pg.Pool, "query"> | pg.PoolClient,
  ids: string[],
  at: string,
): Promise<void> {
  const NOW = `${literal(at)}::timestamptz`;
  await pool.query(
    `WITH failed AS (
       UPDATE events SET poisoned_at = ${NOW}, attempts = 5, last_error = 'QStash 400: bad label',
              next_attempt_at = ${NOW} + interval '1 hour'
        WHERE id = ANY($1::uuid[])
       RETURNING seq, id, type, attempts, poisoned_at, last_error
     ), ${poisonedAlertSql(NOW)}
     SELECT 1`,
    [ids],
  );
}
