import { sql } from "drizzle-orm";
import type { Db } from "./db.ts";
import { deleteInBatches } from "./retention.ts";
import { inTwoTrips, literal, uuidLiteral, type OneTripPool, type StatementResult } from "./one-trip.ts";
import { queryRows } from "./webhooks/rows.ts";

/** How long a write is remembered under its Idempotency-Key (Stripe's figure; ADR 0035). */
export const IDEMPOTENCY_KEY_HOURS = 24;

/** A write's answer as a route gave it, the part a repeat is answered with. */
export interface WriteAnswer {
  status: number;
  /** The `Location` header, for a create. */
  location: string | null;
  /** The route's result (without its events) as the JSON text first sent. */
  result: string;
  /** The events the write committed, in order: the receipt is read from these again. */
  eventIds: string[];
}

/** Who sent the request and which, as far as its key goes. */
export interface KeyedRequest {
  /** The tenant API key's id: keys are per tenant key, never shared. */
  apiKeyId: string;
  /** The client's Idempotency-Key. */
  key: string;
  /** What the request asked for (method, path, validated body), hashed. */
  fingerprint: string;
}

export type KeyedWrite =
  | { outcome: "written"; answer: WriteAnswer }
  | { outcome: "repeated"; answer: WriteAnswer }
  // The key was used for another request within IDEMPOTENCY_KEY_HOURS.
  | { outcome: "reused"; firstAt: Date };

/**
 * Runs `write` once per key. In one transaction: claim the key (an insert into its
 * unique index), run the write on the same transaction, store its answer; so the
 * key is remembered exactly when the write committed, and a write that failed
 * leaves no key behind and runs again when resent. A repeat that comes while the
 * first is still running waits on the index for the first to commit or roll back:
 * then it reads the first's answer, or (rolled back) it becomes the first. A key
 * older than IDEMPOTENCY_KEY_HOURS that the sweep has not deleted yet counts as
 * unused.
 */
export async function writeOnce(
  db: Db,
  request: KeyedRequest,
  write: (tx: Db) => Promise<WriteAnswer>,
): Promise<KeyedWrite> {
  return db.transaction(async (tx) => {
    const [claim] = await queryRows<{ claimed: string }>(tx, sql.raw(claimSql(request)));
    if (claim?.claimed !== "true") {
      // A statement of its own, after the claim waited for the first's transaction:
      // in read committed it sees that row as committed, answer and all.
      return repeatOf(request, (await queryRows<FirstRow>(tx, sql.raw(firstSql(request))))[0]);
    }
    const answer = await write(flat(tx));
    await tx.execute(sql.raw(storeSql(request, answer)));
    return { outcome: "written", answer };
  });
}

/**
 * A write whose whole transaction is statements known before it runs (a note's
 * create, ADR 0019), made for an SQL condition, `claimed`: `statements` change
 * nothing unless it holds, and `answer` reads what they answered (only then).
 */
export type WriteInTrips = (claimed: string) => {
  statements: string[];
  answer(results: StatementResult[]): WriteAnswer;
};

/**
 * writeOnce in two round trips, where through drizzle it takes six (BEGIN, the
 * claim, the write's two statements, the stored answer, COMMIT): BEGIN, the claim,
 * the write's statements and the first's answer (read only when the claim found
 * the key taken) in one message, then the answer stored and COMMIT in another.
 * Each statement of the first message takes its own snapshot, so the read after a
 * claim that waited on the first's transaction sees it committed, as in writeOnce.
 */
export async function writeOnceInTrips(
  pool: OneTripPool,
  request: KeyedRequest,
  write: WriteInTrips,
): Promise<KeyedWrite> {
  const claimed = `current_setting('${CLAIMED}') = 'true'`;
  const { statements, answer: answerOf } = write(claimed);
  let done: KeyedWrite | undefined;
  await inTwoTrips(
    pool,
    [claimSql(request), ...statements, `${firstSql(request)} AND NOT ${claimed}`],
    ([claim, ...rest]) => {
      if (claim?.rows[0]?.claimed !== "true") {
        done = repeatOf(request, rest.at(-1)?.rows[0] as FirstRow | undefined);
        return [];
      }
      const answer = answerOf(rest.slice(0, -1));
      done = { outcome: "written", answer };
      return [storeSql(request, answer)];
    },
  );
  if (!done) throw new Error("writeOnceInTrips: the transaction ended without an outcome");
  return done;
}

/** The transaction-local setting that tells a keyed write's later statements whether the claim took the key. */
const CLAIMED = "edge_outbox.key_claimed";

/**
 * Claims the key for this request, answering `claimed` ('true' or 'false') and
 * leaving it in CLAIMED for the transaction's later statements. A key past
 * IDEMPOTENCY_KEY_HOURS is taken over; one in use by a running request makes this
 * wait for it to commit (taken) or roll back (claimed).
 */
function claimSql(request: KeyedRequest): string {
  return `WITH claimed AS (
            INSERT INTO idempotency_keys (api_key_id, key, fingerprint)
            VALUES (${uuidLiteral(request.apiKeyId)}, ${literal(request.key)}, ${literal(request.fingerprint)})
            ON CONFLICT (api_key_id, key) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint, created_at = now(),
                   status = NULL, location = NULL, result = NULL, event_ids = NULL
             WHERE idempotency_keys.created_at < now() - make_interval(hours => ${IDEMPOTENCY_KEY_HOURS})
            RETURNING id)
          SELECT set_config('${CLAIMED}', (count(*) > 0)::text, true) AS claimed FROM claimed`;
}

/** Stores the write's answer under its claimed key. */
function storeSql(request: KeyedRequest, answer: WriteAnswer): string {
  if (!Number.isInteger(answer.status)) throw new RangeError(`storeSql: status ${answer.status}`);
  return `UPDATE idempotency_keys
             SET status = ${answer.status}, location = ${literal(answer.location)}, result = ${literal(answer.result)},
                 event_ids = ARRAY[${answer.eventIds.map(uuidLiteral).join(", ")}]::uuid[]
           WHERE api_key_id = ${uuidLiteral(request.apiKeyId)} AND key = ${literal(request.key)}`;
}

/** The first request's answer under this key. The ids as JSON, which both drivers parse, whatever their uuid[] parser does. */
function firstSql(request: KeyedRequest): string {
  return `SELECT fingerprint, status, location, result, to_json(event_ids) AS event_ids, created_at
            FROM idempotency_keys
           WHERE api_key_id = ${uuidLiteral(request.apiKeyId)} AND key = ${literal(request.key)}`;
}

interface FirstRow {
  fingerprint: string;
  status: number;
  location: string | null;
  result: string;
  event_ids: string[];
  created_at: Date | string;
}

/**
 * `tx` for a use case whose own transaction would be a savepoint inside it: the
 * same transaction instead. The key's transaction is all or nothing (a write that
 * throws rolls it back, key and all), and no use case catches its own failure to
 * go on, so a savepoint changes nothing a write relies on; it cost two round trips
 * (SAVEPOINT, RELEASE) per keyed write. Nested calls are flat too.
 */
function flat(tx: Db): Db {
  const same = Object.create(tx) as Db;
  same.transaction = ((run: (inner: Db) => Promise<unknown>) => run(same)) as Db["transaction"];
  return same;
}

/** A repeat's outcome: the first's answer, or a key reused for another request. */
function repeatOf(request: KeyedRequest, first: FirstRow | undefined): KeyedWrite {
  if (!first) throw new Error("writeOnce: a claimed key's row is gone");
  if (first.fingerprint !== request.fingerprint)
    return { outcome: "reused", firstAt: new Date(first.created_at) };
  return {
    outcome: "repeated",
    answer: {
      status: first.status,
      location: first.location,
      result: first.result,
      eventIds: first.event_ids,
    },
  };
}

/** The sweep's part: deletes keys past IDEMPOTENCY_KEY_HOURS, in batches. Answers how many went. */
export async function deleteExpiredKeys(db: Db, now: Date, maxBatches?: number): Promise<number> {
  const cutoff = new Date(now.getTime() - IDEMPOTENCY_KEY_HOURS * 3_600_000);
  return deleteInBatches(
    db,
    "idempotency_keys",
    (limit) =>
      sql`SELECT id FROM idempotency_keys WHERE created_at < ${cutoff} ORDER BY created_at LIMIT ${limit}`,
    maxBatches,
  );
}
