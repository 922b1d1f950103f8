import { eq, sql } from "drizzle-orm";
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { EVENT_JSON_SQL } from "./relay/claim.ts";
import { RELAY_POLICY } from "./relay/policy.ts";
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

/** The most an event may weigh as its jobs carry it (EVENT_JSON_SQL's text), in bytes. */
export const MAX_EVENT_BYTES = RELAY_POLICY.maxJobBytes - RELAY_POLICY.jobEnvelopeBytes;

/**
 * Records an event inside the caller's transaction, so the change and its event
 * commit together or not at all (guarantee 1). Pass the transaction, not the
 * database: an event written outside it could outlive a rolled-back change.
 *
 * An event whose jobs would not fit in a QStash message is refused here, with the
 * change still uncommitted, rather than poisoned by the relay after five tries with
 * nothing an operator could do about it. It is measured as the relay will send it
 * (jsonb's own output of the payload, which may be longer than the JSON given), in
 * the INSERT's RETURNING, and taken back out before the error is thrown, so even a
 * caller that catches it commits no event its subscribers could never get.
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
    .returning({
      id: events.id,
      seq: events.seq,
      bytes: sql<number>`octet_length(${sql.raw(EVENT_JSON_SQL)})`.mapWith(Number),
    });
  if (!row) throw new Error("recording the event returned no row");
  if (row.bytes > MAX_EVENT_BYTES) {
    await tx.delete(events).where(eq(events.seq, row.seq));
    throw new InvalidEventError(
      `event ${event.type} for "${event.subject.slice(0, 80)}" is ${row.bytes} bytes as its jobs carry it, ` +
        `over the ${MAX_EVENT_BYTES} that fit in a QStash message: put ids and a few fields in the payload, ` +
        `and let subscribers read the rest`,
    );
  }
  return { id: row.id, seq: row.seq };
}
