import { query, type Queryable } from "./sql.ts";

/** The alert kinds the outbox itself raises: a poisoned event, the relay's lag and failures. */
export const OUTBOX_ALERT_KINDS = ["event.poisoned", "relay.lagging", "relay.failing"] as const;

/**
 * Acknowledges open alerts: one by id, or every open alert of a kind up to the
 * newest the operator was shown (`upTo`, an alert id), so an alert raised after
 * the page was drawn is not resolved unseen. Resolving records that someone has
 * looked; it changes no event (requeue does that). Returns how many were open and
 * are now resolved.
 */
export async function resolveAlerts(
  db: Queryable,
  target: { id: number } | { kind: string; upTo: number },
): Promise<number> {
  const [where, values] =
    "id" in target ? ["id = $1", [target.id]] : ["kind = $1 AND id <= $2", [target.kind, target.upTo]];
  const { rows } = await query<{ id: string }>(
    db,
    `UPDATE outbox_alerts SET resolved_at = now() WHERE ${where} AND resolved_at IS NULL RETURNING id`,
    values,
  );
  return rows.length;
}

/**
 * Resolves one alert, saying whether it was open and when it was resolved (now,
 * or earlier by someone else); undefined when there is no such alert. The read of
 * an alert that was not open is a statement of its own: in the update's statement
 * it would see the row as of the statement's start, and an alert another operator
 * resolved meanwhile (the update waited for them) would read as open there and be
 * taken for none at all.
 */
export async function resolveAlert(
  db: Queryable,
  id: number,
): Promise<{ wasOpen: boolean; resolvedAt: Date; kind: string } | undefined> {
  const resolved = await query<{ resolved_at: Date; kind: string }>(
    db,
    "UPDATE outbox_alerts SET resolved_at = now() WHERE id = $1 AND resolved_at IS NULL RETURNING resolved_at, kind",
    [id],
  );
  const row = resolved.rows[0];
  if (row) return { wasOpen: true, resolvedAt: new Date(row.resolved_at), kind: row.kind };
  const before = await query<{ resolved_at: Date; kind: string }>(
    db,
    "SELECT resolved_at, kind FROM outbox_alerts WHERE id = $1",
    [id],
  );
  const was = before.rows[0];
  return was ? { wasOpen: false, resolvedAt: new Date(was.resolved_at), kind: was.kind } : undefined;
}

/** Open alerts counted by kind, with the newest one's id, for the "resolve all of a kind" buttons. */
export async function openAlertKinds(
  db: Queryable,
): Promise<{ kind: string; count: number; upTo: number }[]> {
  const { rows } = await query<{ kind: string; count: number; up_to: string }>(
    db,
    `SELECT kind, count(*)::int AS count, max(id)::text AS up_to
       FROM outbox_alerts WHERE resolved_at IS NULL GROUP BY kind ORDER BY kind`,
  );
  return rows.map((r) => ({ kind: r.kind, count: r.count, upTo: Number(r.up_to) }));
}
