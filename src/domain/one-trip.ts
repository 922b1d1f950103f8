import { is } from "drizzle-orm";
import { PgTransaction } from "drizzle-orm/pg-core";
import { literal as quoted } from "../outbox/sql.ts";
import type { Db } from "./db.ts";

// A use case's whole transaction in one database round trip: BEGIN, its
// statements and COMMIT sent as one simple-protocol Query message, which Postgres
// runs in order and answers at once (ADR 0019). Through drizzle's transaction the
// same create is four round trips (BEGIN, INSERT, the event-ids read, COMMIT):
// four RTTs of latency, and for each the driver's work and drizzle's query
// building in the Worker and the pooler's framing, which a write with its receipt
// pays in CPU (docs/performance.md, issue 11 item 7). The price is that values
// travel as SQL literals, not parameters (the simple protocol has none):
// `literal` below quotes them.

/** What a pool of node-postgres or the Neon driver (the same API) gives: one connection. */
interface OneTripClient {
  query(text: string): Promise<unknown>;
  release(destroy?: boolean): void;
}
export interface OneTripPool {
  connect(): Promise<OneTripClient>;
}

/** One statement's result from a multi-statement Query (pg answers an array of these). */
export interface StatementResult {
  rows: Record<string, unknown>[];
  rowCount: number | null;
}

/**
 * The pool under `db` when `db` is a database over a pool, not a transaction: only
 * then may a use case run its own BEGIN … COMMIT, on a connection of its own.
 * Given a transaction, a use case's own must be a savepoint inside the caller's
 * (db.ts), so this answers undefined and the use case takes its drizzle path.
 */
export function oneTripPool(db: Db): OneTripPool | undefined {
  if (is(db, PgTransaction)) return undefined;
  const client = (db as { $client?: unknown }).$client as
    Partial<OneTripPool & { idleCount: number }> | undefined;
  // A pool (node-postgres' or the Neon driver's) hands out connections; a single
  // Client has `connect` too, but it opens that client itself, so it is told apart
  // by the count of idle connections only a pool keeps.
  return typeof client?.connect === "function" && typeof client.idleCount === "number"
    ? (client as OneTripPool)
    : undefined;
}

/**
 * Runs `statements` as one transaction in one round trip and answers each
 * statement's result, in order. Atomic as any transaction: a failing statement
 * makes Postgres skip the rest of the message, the transaction is rolled back
 * and the error is thrown. The connection is dropped when even the rollback
 * fails (it may be gone), never handed back mid-transaction.
 */
export async function inOneTrip(pool: OneTripPool, statements: string[]): Promise<StatementResult[]> {
  return onOneConnection(pool, async (client) => {
    const raw = await client.query(`BEGIN;\n${statements.join(";\n")};\nCOMMIT`);
    // BEGIN's and COMMIT's own results frame the statements'.
    return framed(raw, statements.length, 1, 1);
  });
}

/**
 * inOneTrip in two round trips: BEGIN and `first`, then the statements `last` makes
 * of their results, and COMMIT. For a transaction whose last statements carry what
 * JavaScript made of the first's answers (a keyed write's stored answer, ADR 0035),
 * which one message cannot. Answers `first`'s results; atomic as inOneTrip, `last`
 * throwing included.
 */
export async function inTwoTrips(
  pool: OneTripPool,
  first: string[],
  last: (results: StatementResult[]) => string[],
): Promise<StatementResult[]> {
  return onOneConnection(pool, async (client) => {
    const results = framed(await client.query(`BEGIN;\n${first.join(";\n")}`), first.length, 1, 0);
    await client.query([...last(results), "COMMIT"].join(";\n"));
    return results;
  });
}

/**
 * `run` on a connection of its own, rolled back if it throws. The connection is
 * dropped when even the rollback fails (it may be gone), never handed back
 * mid-transaction.
 */
async function onOneConnection<T>(pool: OneTripPool, run: (client: OneTripClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let destroy = false;
  try {
    return await run(client);
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {
      destroy = true;
    });
    throw error;
  } finally {
    client.release(destroy);
  }
}

/** The statements' results out of a message's, between `before` and `after` of the frame's own. */
function framed(raw: unknown, statements: number, before: number, after: number): StatementResult[] {
  const results = raw as StatementResult[];
  if (!Array.isArray(results) || results.length !== statements + before + after)
    throw new Error(`one-trip: ${statements} statements answered ${describe(raw)}`);
  return results.slice(before, results.length - after);
}

function describe(raw: unknown): string {
  return Array.isArray(raw) ? `${raw.length} results` : "one result";
}

/**
 * A text value (or null) as a SQL literal: the outbox's quoting (E'…', quotes and
 * backslashes doubled). NUL, which Postgres text cannot hold and the domain's
 * inputs refuse, is refused here too rather than cut short by the server.
 */
export function literal(value: string | null): string {
  if (value === null) return "NULL";
  if (value.includes("\0")) throw new RangeError("literal: text cannot contain NUL");
  return quoted(value);
}

/** A text[] literal: ARRAY[…]::text[] of quoted elements. */
export function textArrayLiteral(values: readonly string[]): string {
  return `ARRAY[${values.map(literal).join(", ")}]::text[]`;
}

/** A uuid made here, checked to be one, as a literal. */
export function uuidLiteral(value: string): string {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value))
    throw new RangeError(`uuidLiteral: not a uuid: ${value}`);
  return `'${value}'::uuid`;
}
