import { query, type Queryable } from "./sql.ts";

export interface MinuteCount {
  minute: Date;
  recorded: number;
  fanned: number;
}

/** The first minute of the window; $1 is its length in minutes. */
const SINCE = `(date_trunc('minute', now()) - make_interval(mins => $1::int - 1))`;

/**
 * Events recorded and fanned out per minute over the last hour, one entry per
 * minute (zeros included), oldest first. Recorded: events_browse's created_at,
 * found through its BRIN index (the table is insert-only, so recent rows sit in the
 * last block ranges), so it costs the window's rows, not the table's. Fanned: the
 * per-minute counts the mark adds once per pass (outbox_fanned_minutes), which the
 * relay writes instead of an index entry per fanned row on events (docs/adr/0016).
 */
export async function eventsPerMinute(db: Queryable, minutes = 60): Promise<MinuteCount[]> {
  // count(*)::int arrives as a number from both drivers.
  const { rows: found } = await query<{ minute: Date; recorded: number; fanned: number }>(
    db,
    // The window's start written out in each scan's condition, not read from a CTE:
    // the planner then estimates the window's rows, not a third of the table, and
    // does not JIT-compile the query (19 of its 20 ms at a million events).
    `WITH recorded AS (
       SELECT date_trunc('minute', created_at) AS minute, count(*)::int AS n
         FROM events_browse WHERE created_at >= ${SINCE} GROUP BY 1
     ),
     fanned AS (
       SELECT minute, sum(fanned)::int AS n FROM outbox_fanned_minutes WHERE minute >= ${SINCE} GROUP BY 1
     )
     SELECT m.minute, coalesce(r.n, 0) AS recorded, coalesce(f.n, 0) AS fanned
       FROM generate_series(${SINCE}, date_trunc('minute', now()), interval '1 minute') AS m(minute)
       LEFT JOIN recorded r ON r.minute = m.minute
       LEFT JOIN fanned f ON f.minute = m.minute
      ORDER BY m.minute`,
    [minutes],
  );
  return found.map((r) => ({ minute: new Date(r.minute), recorded: r.recorded, fanned: r.fanned }));
}
