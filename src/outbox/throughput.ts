import { query, type Queryable } from "./sql.ts";
import { STATE_SQL } from "./state.ts";

export interface MinuteCount {
  minute: Date;
  recorded: number;
  fanned: number;
}

/**
 * Events recorded and fanned out per minute over the last hour, one entry per
 * minute (zeros included), oldest first. `created_at` has no index, so the
 * recorded count is assembled from the three partial indexes, one per state: a
 * row recorded in the window is pending now, or was fanned or poisoned after it
 * was recorded, hence within the window too. Each part costs the window's rows
 * (plus the backlog, which stats() counts anyway), never the table's.
 */
export async function eventsPerMinute(db: Queryable, minutes = 60): Promise<MinuteCount[]> {
  // count(*)::int arrives as a number from both drivers.
  const { rows: found } = await query<{ minute: Date; recorded: number; fanned: number }>(
    db,
    `WITH bounds AS (SELECT date_trunc('minute', now()) - make_interval(mins => $1::int - 1) AS since),
     recent AS (
       SELECT created_at FROM events, bounds
        WHERE ${STATE_SQL.fanned} AND fanned_out_at >= bounds.since AND created_at >= bounds.since
       UNION ALL
       SELECT created_at FROM events, bounds WHERE ${STATE_SQL.pending} AND created_at >= bounds.since
       UNION ALL
       SELECT created_at FROM events, bounds
        WHERE ${STATE_SQL.poisoned} AND poisoned_at >= bounds.since AND created_at >= bounds.since
     ),
     recorded AS (
       SELECT date_trunc('minute', created_at) AS minute, count(*)::int AS n FROM recent GROUP BY 1
     ),
     fanned AS (
       SELECT date_trunc('minute', fanned_out_at) AS minute, count(*)::int AS n
         FROM events, bounds WHERE ${STATE_SQL.fanned} AND fanned_out_at >= bounds.since GROUP BY 1
     )
     SELECT m.minute, coalesce(r.n, 0) AS recorded, coalesce(f.n, 0) AS fanned
       FROM bounds, generate_series(bounds.since, date_trunc('minute', now()), interval '1 minute') AS m(minute)
       LEFT JOIN recorded r ON r.minute = m.minute
       LEFT JOIN fanned f ON f.minute = m.minute
      ORDER BY m.minute`,
    [minutes],
  );
  return found.map((r) => ({ minute: new Date(r.minute), recorded: r.recorded, fanned: r.fanned }));
}
