// TEMPORARY SHIM, deleted when the relay core merges from main: the part of the
// core's contract (recordEvent) that the reference domain needs to compile and
// run its tests in the meantime. Behaviour matches the contract: one INSERT in
// the caller's transaction.
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { events } from "./schema.ts";

export interface EventInput {
  type: string;
  subject: string;
  scope?: string | null;
  payload?: unknown;
}

export async function recordEvent(
  tx: PgDatabase<PgQueryResultHKT>,
  event: EventInput,
): Promise<{ id: string; seq: number }> {
  const [row] = await tx
    .insert(events)
    .values({
      type: event.type,
      subject: event.subject,
      scope: event.scope ?? null,
      payload: event.payload ?? {},
    })
    .returning({ id: events.id, seq: events.seq });
  if (!row) throw new Error("recordEvent: INSERT returned no row");
  return row;
}
