/**
 * The relay speaks to Postgres through the smallest surface that both `pg` (Node)
 * and `@neondatabase/serverless` (Workers) provide, so one implementation serves
 * both. It sends SQL text itself rather than through Drizzle because the claim and
 * the mark each travel as one multi-statement round trip (see docs/adr/0002).
 */
/**
 * One statement's result. `Row` is a table's columns as both drivers return them:
 * `int8` as a string, timestamps as Dates, jsonb parsed. Each reader declares its
 * row type once (graphile-worker's `client.query<DbJob>`) instead of casting columns.
 */
export interface SqlResult<Row = Record<string, unknown>> {
  rows: Row[];
  rowCount: number | null;
}

export interface SqlClient {
  // Multi-statement text answers with one result per statement.
  query(text: string, values?: unknown[]): Promise<unknown>;
  // The same, answered to a callback: what the relay sends with (see send()). A
  // client without this form answers a promise, which send() then takes.
  query(text: string, callback: QueryCallback): unknown;
  release(destroy?: boolean | Error): void;
  // pg-style clients emit "error" when the server drops them while no query is
  // running (e.g. mid-publish); with no listener that event kills the process.
  on?(event: "error", listener: (error: Error) => void): unknown;
  off?(event: "error", listener: (error: Error) => void): unknown;
}

export type QueryCallback = (error: Error | null, result: unknown) => void;

/**
 * Sends `text` on `client` and answers what the driver answers, through the
 * driver's callback form rather than its promise form. In both `pg` and the Neon
 * driver (which bundles pg's client) the promise form builds the query first and
 * gives it its callback afterwards; measured on Node 20, with that shape nearly every
 * row of every result outlived a young-generation collection and was copied into
 * the old generation, about 10 MB per scavenge against 0.17 MB for the same loop with
 * the callback passed along with the text (docs/performance.md, issue 11's sixth
 * round). The relay reads 200 rows a pass, so that copying was most of its CPU.
 */
export function send(client: SqlClient, text: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const answered = client.query(text, (error, result) => (error ? reject(error) : resolve(result)));
    // A promise back means the client ignored the callback (a wrapper that knows
    // only the promise form): its promise answers instead.
    if (isThenable(answered)) answered.then(resolve, reject);
  });
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | undefined)?.then === "function";
}

/** Anything that runs one query: a pool, a client, a transaction. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

export interface SqlPool {
  connect(): Promise<SqlClient>;
}

/** One statement, its rows typed by the caller: the only cast from what the drivers return. */
export async function query<Row>(db: Queryable, text: string, values?: unknown[]): Promise<SqlResult<Row>> {
  return (await db.query(text, values)) as SqlResult<Row>;
}

/** A multi-statement round trip: one result per statement, each typed by the caller. */
export function results<Rows extends unknown[]>(raw: unknown): { [K in keyof Rows]?: SqlResult<Rows[K]> } {
  return (Array.isArray(raw) ? raw : [raw]) as { [K in keyof Rows]?: SqlResult<Rows[K]> };
}

/**
 * A string as a SQL literal. E'' syntax makes backslashes mean the same whatever
 * standard_conforming_strings says, so doubling quotes and backslashes is enough.
 * NUL cannot be stored in text or jsonb; callers strip it from what they embed.
 */
export function literal(value: string): string {
  return `E'${escapeInLiteral(value)}'`;
}

/** A string as it goes between the quotes of an E'' literal: backslashes and single quotes doubled. */
export function escapeInLiteral(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/'/g, "''");
}

/** `now` for a statement: the injected clock in tests, the transaction's clock otherwise. */
export function nowSql(now: Date | undefined): string {
  return now ? `'${now.toISOString()}'::timestamptz` : "now()";
}

export function positiveInt(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1)
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/**
 * A newest-first page from `found`, read with one row more than `limit` asked: that
 * row tells whether an older page exists, without a count. The next page's cursor
 * is the last row's key (its seq or id), or null on the last page.
 */
export function keysetPage<Row>(
  found: Row[],
  limit: number,
  keyOf: (row: Row) => number,
): { rows: Row[]; nextBefore: number | null } {
  const rows = found.slice(0, limit);
  const last = rows[rows.length - 1];
  return { rows, nextBefore: found.length > limit && last !== undefined ? keyOf(last) : null };
}
