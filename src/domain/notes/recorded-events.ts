import { and, gt, inArray, max, sql } from "drizzle-orm";
import { events } from "../../outbox/schema.ts";
import type { Db } from "../db.ts";

// Notes' events are written by the corpus_notes trigger, so the use case never
// sees their ids; it reads them back inside its own transaction. How it tells
// its events from others':
//
// 1. Before writing, read the high-water mark `max(seq)` in its own statement.
//    Seq values come from one sequence, handed out in order, so every event this
//    transaction inserts afterwards has a seq above the mark, and every event that
//    was committed before the read is at or below it.
// 2. After writing, select events with seq above the mark AND a subject this
//    transaction owns: a note it just created (a fresh server-made uuid no one
//    else can reference yet), or a note it holds the row lock on. Any other
//    writer of that note either committed before the lock was granted (so its
//    event is under the mark, which is why the mark is read in a statement
//    *after* the lock: under READ COMMITTED a statement that waited for a lock
//    still uses the snapshot from before the wait) or is blocked until we commit
//    (so its event is invisible to us).
//
// Why not `xmin = current transaction id`: a use case given a transaction runs
// inside a savepoint, whose rows carry the subtransaction's xid, so it would find
// nothing. The seq bound also keeps the lookup a short primary-key range scan
// instead of a scan of all history (subject has no index, on purpose: the events
// table is write-hot).

/** The highest seq visible now. Read it after taking the locks that own the subjects. */
export async function eventsHighWater(tx: Db): Promise<number> {
  const [row] = await tx.select({ seq: max(events.seq) }).from(events);
  return row?.seq ?? 0;
}

/**
 * The same mark, read by the INSERT that creates the subjects, as a RETURNING
 * column: one round trip fewer for a create, which has no lock to take first.
 * The subquery runs once, on the statement's snapshot, before any row's AFTER
 * trigger has run (those fire once the statement's rows are in, and their rows
 * are not in its snapshot either): it sees what was committed before the
 * INSERT began, and none of the events the INSERT's own trigger records.
 */
export const highWaterReturned = sql<number>`(SELECT coalesce(max(${events.seq}), 0) FROM ${events})`.mapWith(
  Number,
);

/** Ids of events about `subjects` that appeared after `highWater`, in seq order. */
export async function eventsRecordedSince(tx: Db, highWater: number, subjects: string[]): Promise<string[]> {
  if (subjects.length === 0) return [];
  const rows = await tx
    .select({ id: events.id })
    .from(events)
    .where(and(gt(events.seq, highWater), inArray(events.subject, subjects)))
    .orderBy(events.seq);
  return rows.map((r) => r.id);
}
