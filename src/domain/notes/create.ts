import { corpusNotes } from "../schema.ts";
import { asDate, type Db } from "../db.ts";
import { getTableColumns } from "drizzle-orm";
import {
  inOneTrip,
  literal,
  oneTripPool,
  textArrayLiteral,
  uuidLiteral,
  type StatementResult,
} from "../one-trip.ts";
import { eventsRecordedSince, highWaterReturned } from "./recorded-events.ts";
import { noteInput, type Note, type NoteInput } from "./schemas.ts";

/** Creates a note; the table's trigger records `corpus.note.created` in the same transaction. */
export async function createNote(db: Db, input: NoteInput): Promise<{ note: Note; eventIds: string[] }> {
  const values = noteInput.parse(input);
  const pool = oneTripPool(db);
  return pool ? createInOneTrip(pool, values) : createInTransaction(db, values);
}

type Values = ReturnType<typeof noteInput.parse>;

/**
 * Given a transaction: drizzle's, which becomes a savepoint inside the caller's.
 * The high-water mark comes back with the row (recorded-events.ts), not from a statement of its own.
 */
async function createInTransaction(db: Db, values: Values) {
  return db.transaction(async (tx) => {
    const [row] = await tx
      .insert(corpusNotes)
      .values(values)
      .returning({ ...getTableColumns(corpusNotes), highWater: highWaterReturned });
    if (!row) throw new Error("createNote: INSERT returned no row");
    const { highWater, ...note } = row;
    return { note, eventIds: await eventsRecordedSince(tx, highWater, [note.id]) };
  });
}

/** The session setting that carries the high-water mark from its statement to the events read. */
const HIGH_WATER = "edge_outbox.create_high_water";

/**
 * Given a database: the same transaction in one round trip (one-trip.ts), the
 * path a Worker's write takes.
 */
async function createInOneTrip(pool: NonNullable<ReturnType<typeof oneTripPool>>, values: Values) {
  const create = statementsFor(values);
  return create.read(await inOneTrip(pool, create.statements));
}

/**
 * The create as statements, for one round trip (createInOneTrip) or a keyed write's
 * transaction (idempotency.ts), where it inserts only if `onlyIf` (an SQL condition)
 * holds and `read` is called only then. The note's id is made here, so the statement
 * that reads the trigger's events can name its subject before the INSERT has
 * answered; like the column's default (gen_random_uuid) it is a fresh random uuid
 * that no other transaction can reference before this one commits. The high-water
 * mark is read by a statement of its own before the INSERT, as recorded-events.ts
 * describes, and handed to the events read in a transaction-local setting.
 */
export function createNoteStatements(input: NoteInput, onlyIf?: string) {
  return statementsFor(noteInput.parse(input), onlyIf);
}

function statementsFor(values: Values, onlyIf?: string) {
  const id = crypto.randomUUID();
  const statements = [
    `SELECT set_config('${HIGH_WATER}', coalesce(max(seq), 0)::text, true) FROM events`,
    `INSERT INTO corpus_notes (id, scope, title, body, tags)
     SELECT ${uuidLiteral(id)}, ${literal(values.scope ?? null)}, ${literal(values.title)},
            ${literal(values.body)}, ${textArrayLiteral(values.tags)}${onlyIf ? ` WHERE ${onlyIf}` : ""}
     RETURNING id, scope, title, body, tags, created_at, updated_at`,
    `SELECT id FROM events
      WHERE seq > current_setting('${HIGH_WATER}')::bigint AND subject = ${literal(id)}
      ORDER BY seq`,
  ];
  /** The note and its events, from the three statements' results. */
  const read = ([, inserted, recorded]: StatementResult[]): { note: Note; eventIds: string[] } => {
    const row = inserted?.rows[0];
    if (!row) throw new Error("createNote: INSERT returned no row");
    // As drizzle decodes them: text and uuid as they come, text[] parsed by the
    // driver, timestamptz as a Date (the driver's, or from its text when a type
    // parser leaves it as text).
    const r = row as { id: string; scope: string | null; title: string; body: string; tags: string[] };
    const note: Note = {
      id: r.id,
      scope: r.scope,
      title: r.title,
      body: r.body,
      tags: r.tags,
      createdAt: asDate(row.created_at),
      updatedAt: asDate(row.updated_at),
    };
    return { note, eventIds: (recorded?.rows ?? []).map((r) => r.id as string) };
  };
  return { statements, read };
}
