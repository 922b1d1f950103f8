import { InvalidInputError } from "./errors.ts";
import { COLUMNS, assertEventId, globToLike, toEvent, type DbEvent, type EventRow } from "./operations.ts";
import { query, type Queryable } from "./sql.ts";
import { STATE_SQL, type EventState } from "./state.ts";

export interface EventFilter {
  state?: EventState;
  /** A glob over the type, as subscriptions write them: `supplier.*`. */
  type?: string;
  subject?: string;
  scope?: string;
  /** Recorded at or after. */
  from?: Date;
  /** Recorded before. */
  to?: Date;
  /** Only these events (e.g. the ones just requeued). */
  ids?: string[];
}

export interface BrowseOptions extends EventFilter {
  /** Keyset cursor: only rows with a smaller seq (the previous page's last). */
  beforeSeq?: number;
  limit?: number;
}

export interface EventPage {
  events: EventRow[];
  /** The cursor for the next (older) page, or null when this is the last. */
  nextBeforeSeq: number | null;
}

/**
 * Newest first, one page at a time. Pages are cut by seq (keyset), never by
 * OFFSET: a page deep in a million rows costs what the first one does, and rows
 * recorded while an operator pages do not shift what the next page shows.
 * seq is only an order here, not a completeness cursor (see docs/adr/0001): a
 * row committed late with a smaller seq appears when the operator reloads.
 */
export async function browseEvents(db: Queryable, options: BrowseOptions = {}): Promise<EventPage> {
  const limit = options.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > 500) {
    throw new InvalidInputError("limit must be an integer from 1 to 500");
  }
  const where: string[] = [];
  const values: unknown[] = [];
  const bind = (value: unknown) => {
    values.push(value);
    return `$${values.length}`;
  };
  if (options.state) where.push(STATE_SQL[options.state]);
  if (options.type) where.push(`type LIKE ${bind(globToLike(options.type))}`);
  if (options.subject) where.push(`subject = ${bind(options.subject)}`);
  if (options.scope) where.push(`scope = ${bind(options.scope)}`);
  if (options.from) where.push(`created_at >= ${bind(options.from)}`);
  if (options.to) where.push(`created_at < ${bind(options.to)}`);
  if (options.ids) {
    options.ids.forEach(assertEventId);
    where.push(`id = ANY(${bind(options.ids)}::uuid[])`);
  }
  if (options.beforeSeq !== undefined) where.push(`seq < ${bind(options.beforeSeq)}`);
  // One row more than asked tells whether an older page exists, without a count.
  const { rows: found } = await query<DbEvent>(
    db,
    `SELECT ${COLUMNS} FROM events ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY seq DESC LIMIT ${bind(limit + 1)}`,
    values,
  );
  const events = found.slice(0, limit).map(toEvent);
  return {
    events,
    nextBeforeSeq: found.length > limit ? (events[events.length - 1]?.seq ?? null) : null,
  };
}
