import { sql } from "drizzle-orm";
import type { Db } from "./db.ts";
import { deleteInBatches } from "./retention.ts";
import { queryRows, uuidArray } from "./webhooks/rows.ts";

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
    const claimed = await queryRows<{ id: number }>(
      tx,
      sql`INSERT INTO idempotency_keys (api_key_id, key, fingerprint)
          VALUES (${request.apiKeyId}, ${request.key}, ${request.fingerprint})
          ON CONFLICT (api_key_id, key) DO UPDATE
             SET fingerprint = EXCLUDED.fingerprint, created_at = now(),
                 status = NULL, location = NULL, result = NULL, event_ids = NULL
           WHERE idempotency_keys.created_at < now() - make_interval(hours => ${IDEMPOTENCY_KEY_HOURS})
          RETURNING id`,
    );
    if (claimed.length === 0) return repeatOf(tx, request);
    const answer = await write(flat(tx));
    await tx.execute(sql`
      UPDATE idempotency_keys
         SET status = ${answer.status}, location = ${answer.location}, result = ${answer.result},
             event_ids = ${uuidArray(answer.eventIds)}::uuid[]
       WHERE api_key_id = ${request.apiKeyId} AND key = ${request.key}`);
    return { outcome: "written", answer };
  });
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

/**
 * The first request's answer. Read by a statement of its own, after the claim
 * waited for that request's transaction: in read committed it sees the row as
 * committed, answer and all.
 */
async function repeatOf(tx: Db, request: KeyedRequest): Promise<KeyedWrite> {
  const [first] = await queryRows<{
    fingerprint: string;
    status: number;
    location: string | null;
    result: string;
    event_ids: string[];
    created_at: Date | string;
  }>(
    tx,
    // The ids as JSON, which both drivers parse, whatever their uuid[] parser does.
    sql`SELECT fingerprint, status, location, result, to_json(event_ids) AS event_ids, created_at
          FROM idempotency_keys WHERE api_key_id = ${request.apiKeyId} AND key = ${request.key}`,
  );
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
