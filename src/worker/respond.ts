import type { Context } from "hono";
import type { Db } from "../domain/db.ts";
import { IDEMPOTENCY_KEY_HOURS, writeOnce, writeOnceInTrips } from "../domain/idempotency.ts";
import { oneTripPool, type StatementResult } from "../domain/one-trip.ts";
import { awaitFanout, receiptFromKick, type Receipt } from "../outbox/index.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";
import { retryAfterSeconds } from "./dashboard/lockout.ts";
import { fingerprintOf, parseIdempotencyKey } from "./idempotency.ts";
import { kickRelay } from "./relay.ts";

/** What a tenant write did: its result, the events it committed, and how to answer. */
export interface Write<T> {
  result: T;
  eventIds: string[];
  /** 201 for a create (then `location` names what it created); 200 by default. */
  status?: 200 | 201;
  location?: string;
}

/**
 * Runs a tenant write and answers it as `written` does; every domain write goes
 * through here. With an `Idempotency-Key` the write runs once per key and API key
 * (ADR 0035): the key is claimed in the write's own transaction, so it is kept
 * exactly when the write committed, and the same request sent again within
 * IDEMPOTENCY_KEY_HOURS is answered with the first's body and Location, and
 * `Idempotent-Replayed: true`; its events' part, and so a waited-for status, is read
 * again from the same events, as they stand now. The key with another request is a 422 and writes nothing.
 * A write that failed is not remembered: sent again, it runs again. `request` is
 * what the route validated, the body part of the fingerprint.
 */
export async function answerWrite<T extends Record<string, unknown>>(
  c: Context<HonoEnv>,
  request: unknown,
  write: (db: Db) => Promise<Write<T>>,
  inTrips?: KeyedTrips<T>,
) {
  const key = parseIdempotencyKey(c.req.header("idempotency-key"));
  if (key === undefined) {
    const done = await write(c.var.db);
    if (done.location) c.header("Location", done.location);
    return written(c, done.result, done.eventIds, done.status);
  }
  const fingerprint = await fingerprintOf(c.req.method, c.req.path, request);
  const keyed = { apiKeyId: c.var.tenant.keyId, key, fingerprint };
  const pool = inTrips && oneTripPool(c.var.db);
  const once =
    inTrips && pool
      ? await writeOnceInTrips(pool, keyed, (claimed) => {
          const trips = inTrips(claimed);
          return { statements: trips.statements, answer: (results) => storedAnswer(trips.read(results)) };
        })
      : await writeOnce(c.var.db, keyed, async (tx) => storedAnswer(await write(tx)));
  if (once.outcome === "reused")
    throw new ApiError(
      "UNPROCESSABLE_CONTENT",
      `Idempotency-Key ${JSON.stringify(key)} was used at ${once.firstAt.toISOString()} for another request ` +
        `(a key stands for one request for ${IDEMPOTENCY_KEY_HOURS} h): send a new key with a new request`,
      [{ path: "header.idempotency-key", message: "was used for another request" }],
    );
  // A repeat kicks the relay too (in written): if the first died between its commit
  // and its kick, the repeat's wait is then not left to the next cron sweep.
  if (once.outcome === "repeated") c.header("Idempotent-Replayed", "true");
  const { answer } = once;
  if (answer.location) c.header("Location", answer.location);
  return written(c, JSON.parse(answer.result) as T, answer.eventIds, answer.status as 200 | 201);
}

/**
 * A write as statements (one-trip.ts), for a keyed request: its transaction and
 * the key's in two round trips instead of six (writeOnceInTrips). Made for an SQL
 * condition, `claimed`: the statements change nothing unless it holds, and `read`
 * makes the write's answer of their results. The same write as answerWrite's
 * `write`, which a request without a key, or a database that is not a pool, takes.
 */
export type KeyedTrips<T> = (claimed: string) => {
  statements: string[];
  read(results: StatementResult[]): Write<T>;
};

/** What a keyed write stores of its answer: a repeat is answered from it. */
function storedAnswer<T>(done: Write<T>) {
  return {
    status: done.status ?? 200,
    location: done.location ?? null,
    result: JSON.stringify(done.result),
    eventIds: done.eventIds,
  };
}

/**
 * How every write answers, and so the one place that kicks the relay after a
 * commit and honours `Prefer: wait=N`. Called only after the use case's
 * transaction has committed: the kick must never see (or miss) uncommitted rows.
 *
 * - Without Prefer: the result and the ids of the events it committed; the kick
 *   runs after the response (waitUntil, on the request's pool).
 * - With `Prefer: wait=N`: the same kick, awaited here up to N seconds, then the
 *   receipt, taken from the kick's own result when its passes fanned every event
 *   out, else read from the rows (until complete or N seconds passed). Every
 *   event fanned out (or poisoned): the route's own status (201 for creates,
 *   else 200) with each event's fan-out (subscription → messageId, or
 *   coalescedInto). Otherwise 202 Accepted, `Location: /events/<id>` of the
 *   first event not yet fanned out (pollLink), and the events as far as they got.
 */
async function written<T extends Record<string, unknown>>(
  c: Context<HonoEnv>,
  result: T,
  eventIds: string[],
  status: 200 | 201 = 200,
) {
  // A write that changed nothing recorded no event: nothing to fan out or wait for,
  // so a wait asked for is met at once, and said so as for any other write.
  if (eventIds.length === 0) {
    if (c.var.wait !== undefined) c.header("Preference-Applied", `wait=${c.var.wait}`);
    return c.json({ ...result, events: [] }, status);
  }
  const kick = kickRelay(c.var.pool, c.var.config, c.var.wait === undefined ? [] : eventIds);
  // Registered either way, so the request's pool outlives a kick that outlives the wait.
  c.var.background(kick);

  const wait = c.var.wait;
  if (wait === undefined) return c.json({ ...result, events: eventIds.map((id) => ({ id })) }, status);

  const receipt = await awaitFanout(c.var.pool, eventIds, {
    deadline: Date.now() + wait * 1000,
    // When the kick's own passes fanned every event out, they answer: no read.
    kicked: kick.then((k) => (k ? receiptFromKick(eventIds, k.fannedEvents) : undefined)),
  });
  c.header("Preference-Applied", `wait=${wait}`);
  if (receipt.complete) return c.json({ ...result, events: receipt.events }, status);
  c.header("Location", pollLink(eventIds, receipt));
  // Settled already when the relay is backed off (its drain returns at once); never awaited here.
  const kicked = await Promise.race([kick, Promise.resolve(undefined)]);
  c.header("Retry-After", String(pollAfterSeconds(kicked ?? null)));
  return c.json({ ...result, events: receipt.events }, 202);
}

/** The longest a 202 asks a client to wait before it polls: an operator may end a backoff early. */
export const MAX_POLL_AFTER_SECONDS = 60;

/**
 * How soon a 202's caller should poll: a pass takes tens of milliseconds, so 1 s,
 * unless the kick found the relay backed off, when nothing moves before the backoff
 * ends; a client polling every second meanwhile was answered the same thing sixty
 * times (the outage walkthrough). At most MAX_POLL_AFTER_SECONDS.
 */
export function pollAfterSeconds(
  kick: { stoppedBecause: string; backedOffUntil: Date | null } | null,
  now = Date.now(),
): number {
  if (kick?.stoppedBecause !== "backoff" || !kick.backedOffUntil) return 1;
  return Math.min(MAX_POLL_AFTER_SECONDS, retryAfterSeconds(kick.backedOffUntil, now));
}

/**
 * Where a 202 sends its caller to poll: the first event still on its way. The first
 * event of an import of 2,000 was usually fanned out already, and a client polling
 * it concluded the whole write had been while 1,400 events had not.
 */
export function pollLink(eventIds: string[], receipt: Receipt): string {
  const waiting = receipt.events.find((e) => e.fannedOutAt === null && !e.poisoned);
  return `/events/${waiting?.id ?? eventIds[0]}`;
}
