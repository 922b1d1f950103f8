/**
 * Where an event stands, defined once. The three states are derived from two
 * nullable timestamps; every query that filters by state uses these predicates,
 * and the `events_one_state` CHECK constraint keeps "fanned and poisoned"
 * impossible, so the predicates are mutually exclusive and cover every row.
 */
export const EVENT_STATES = ["pending", "fanned", "poisoned"] as const;
export type EventState = (typeof EVENT_STATES)[number];

/**
 * SQL predicates over the `events` columns. `pending` is textually the predicate
 * of the claim's partial index (`events_unfanned_idx`): keep them identical, or
 * the planner stops using the index.
 */
export const STATE_SQL: Record<EventState, string> = {
  pending: "fanned_out_at IS NULL AND poisoned_at IS NULL",
  fanned: "fanned_out_at IS NOT NULL",
  poisoned: "poisoned_at IS NOT NULL",
};

/** Pending and due now (its own backoff, if any, has passed); `now` is a SQL expression. */
export function dueSql(now: string): string {
  return `${STATE_SQL.pending} AND (next_attempt_at IS NULL OR next_attempt_at <= ${now})`;
}

export function stateOf(row: { fannedOutAt: Date | null; poisonedAt: Date | null }): EventState {
  if (row.fannedOutAt) return "fanned";
  if (row.poisonedAt) return "poisoned";
  return "pending";
}

export function isEventState(value: string): value is EventState {
  return (EVENT_STATES as readonly string[]).includes(value);
}

/**
 * A predicate on `events` (aliased `alias`) for the events whose ids are in the
 * uuid[] the SQL expression `ids` gives. Ids are indexed on events_browse, not on
 * events (docs/adr/0021): found there, they become seqs looked up by events'
 * primary key, one index probe each, never a scan of either table.
 */
export function idsSql(ids: string, alias = "events"): string {
  return `${alias}.seq = ANY (ARRAY(SELECT seq FROM events_browse WHERE id = ANY (${ids}::uuid[])))`;
}
