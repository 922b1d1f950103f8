import { query, type Queryable } from "./sql.ts";

/**
 * Acknowledges open alerts: one by id, or every open alert of a kind. Resolving
 * records that someone has looked; it changes no event (requeue does that).
 * Returns how many were open and are now resolved.
 */
export async function resolveAlerts(
  db: Queryable,
  target: { id: number } | { kind: string },
): Promise<number> {
  const [where, value] = "id" in target ? ["id = $1", target.id] : ["kind = $1", target.kind];
  const { rows } = await query<{ id: string }>(
    db,
    `UPDATE outbox_alerts SET resolved_at = now() WHERE ${where} AND resolved_at IS NULL RETURNING id`,
    [value],
  );
  return rows.length;
}

/** Open alerts counted by kind, for the "resolve all of a kind" buttons. */
export async function openAlertKinds(db: Queryable): Promise<{ kind: string; count: number }[]> {
  const { rows } = await query<{ kind: string; count: number }>(
    db,
    `SELECT kind, count(*)::int AS count FROM outbox_alerts WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind`,
  );
  return rows;
}
