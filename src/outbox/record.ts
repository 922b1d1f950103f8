import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { events } from "./schema.ts";

export interface EventInput {
  /** Dotted name, e.g. `supplier.connected`; subscriptions match it with globs. */
  type: string;
  /** What the event is about, e.g. the supplier's id; coalescing groups by it. */
  subject: string;
  /** Tenant, when events belong to one. */
  scope?: string | null;
  payload?: unknown;
}

export interface RecordedEvent {
  id: string;
  seq: number;
}

const TYPE = /^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+$/;

export class InvalidEventError extends Error {
  override readonly name = "InvalidEventError";
}

/**
 * Records an event inside the caller's transaction, so the change and its event
 * commit together or not at all (guarantee 1). Pass the transaction, not the
 * database: an event written outside it could outlive a rolled-back change.
 */
export async function recordEvent<T extends PgQueryResultHKT>(
  tx: PgDatabase<T, Record<string, unknown>>,
  event: EventInput,
): Promise<RecordedEvent> {
  if (!TYPE.test(event.type)) {
    throw new InvalidEventError(
      `event type "${event.type}" must be dotted lower-case, e.g. "supplier.connected"`,
    );
  }
  if (event.subject.length === 0) throw new InvalidEventError("event subject must not be empty");
  const [row] = await tx
    .insert(events)
    .values({
      type: event.type,
      subject: event.subject,
      scope: event.scope ?? null,
      payload: event.payload ?? {},
    })
    .returning({ id: events.id, seq: events.seq });
  if (!row) throw new Error("recording the event returned no row");
  return row;
}
