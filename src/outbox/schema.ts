import { sql } from "drizzle-orm";
import {
  bigint,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  smallint,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from "drizzle-orm/pg-core";
import { STATE_SQL } from "./state.ts";

/**
 * What each subscription got when an event was fanned out: the QStash message id
 * of its job, or the id of the later event (same subject, same batch) whose job
 * covers it for a coalescing subscription.
 */
export type FanoutEntry = { messageId: string; deduplicated?: boolean } | { coalescedInto: string };
export type Fanout = Record<string, FanoutEntry>;

const tz = { withTimezone: true, mode: "date" } as const;

export const events = pgTable(
  "events",
  {
    // Claim order. Assigned when the inserting transaction runs, not when it
    // commits, so it is never used as a cursor (see docs/adr/0001).
    seq: bigint("seq", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    // Time-ordered (UUIDv7, migration 0007): the mark re-inserts every marked row into
    // this unique index (a non-HOT update), and a batch's ids then sit on a few
    // neighbouring leaves instead of one random leaf each (ADR 0014).
    id: uuid("id")
      .notNull()
      .unique()
      .default(sql`outbox_uuid_v7()`),
    type: text("type").notNull(),
    subject: text("subject").notNull(),
    scope: text("scope"),
    payload: jsonb("payload").notNull().default({}),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    fannedOutAt: timestamp("fanned_out_at", tz),
    fanout: jsonb("fanout").$type<Fanout>(),
    attempts: integer("attempts").notNull().default(0),
    lastError: text("last_error"),
    nextAttemptAt: timestamp("next_attempt_at", tz),
    poisonedAt: timestamp("poisoned_at", tz),
  },
  (t) => [
    // The claim walks this index only: its size tracks the backlog, not history.
    index("events_unfanned_seq_idx").on(t.seq).where(sql.raw(STATE_SQL.pending)),
    index("events_poisoned_idx").on(t.poisonedAt).where(sql.raw(STATE_SQL.poisoned)),
    // The overview's fanned-per-minute chart, read every few seconds: without it that
    // count scanned the table (235–311 ms at 1,000,000 events against 0.5 ms). The
    // mark pays one entry per fanned row for it (docs/adr/0014, amended).
    index("events_fanned_out_at_idx").on(t.fannedOutAt).where(sql.raw(STATE_SQL.fanned)),
    // No index on fanned rows: the mark would add an entry to it for every event it
    // marks; retention finds old fanned rows by seq instead (maintenance.ts, ADR 0014).
    // The dashboard's events page (browse.ts, docs/adr/0013). The relay's mark is a
    // non-HOT update, so each index here costs every marked row one more entry (a
    // BRIN one a summary check, sometimes an update): these are the fewest that keep
    // every filter of a page within 50 ms at a million rows.
    // Time ranges: `seq + 0` is seq hidden from the primary key, so the rows of a
    // time range recorded out of seq order are found by block-range pruning.
    index("events_seq_created_brin")
      .using("brin", sql`(seq + 0) int8_minmax_multi_ops`, t.createdAt.op("timestamptz_minmax_multi_ops"))
      .with({ pages_per_range: 16, autosummarize: true }),
    // Type globs are resolved to the types present by a loose scan of this index;
    // seq second, so a type's rows within a time range's seq band are one index range.
    index("events_type_seq_idx").on(t.type, t.seq),
    // A tenant with few events (or none) would otherwise be a walk of the table.
    index("events_scope_seq_idx").on(t.scope, t.seq),
    // One subject's events, newest first, in as many entries as the page shows. The
    // costliest of the three on the mark (subjects are random keys, so a batch's
    // entries land on as many leaf pages), and the only one that holds a subject with
    // hundreds of events spread over a year within 50 ms (ADR 0013).
    index("events_subject_seq_idx").on(t.subject, t.seq),
    // One state at a time: the state predicates (state.ts) rely on it.
    check("events_one_state", sql`fanned_out_at IS NULL OR poisoned_at IS NULL`),
  ],
);

/**
 * Pass-level backoff lives in the database because no edge process lives long
 * enough to remember it between passes. One row (id = 1).
 */
export const relayState = pgTable(
  "outbox_relay_state",
  {
    id: smallint("id").primaryKey().default(1),
    failures: integer("failures").notNull().default(0),
    backoffUntil: timestamp("backoff_until", tz),
    lastError: text("last_error"),
    lastFailureAt: timestamp("last_failure_at", tz),
    lastSuccessAt: timestamp("last_success_at", tz),
  },
  (t) => [check("outbox_relay_state_singleton", sql`${t.id} = 1`)],
);

/** Things an operator must look at: poisoned events, jobs that exhausted their retries. */
export const alerts = pgTable(
  "outbox_alerts",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    kind: text("kind").notNull(),
    eventId: uuid("event_id"),
    subscription: text("subscription"),
    message: text("message").notNull(),
    details: jsonb("details"),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    resolvedAt: timestamp("resolved_at", tz),
  },
  (t) => [
    index("outbox_alerts_open_idx")
      .on(t.createdAt)
      .where(sql`resolved_at IS NULL`),
    // Relay-wide conditions (relay.lagging, relay.failing) have at most one open
    // alert each. Two overlapping sweeps both pass a NOT EXISTS check; only this
    // index decides which one raises it.
    uniqueIndex("outbox_alerts_open_relay_kind_key")
      .on(t.kind)
      .where(sql`resolved_at IS NULL AND kind LIKE 'relay.%'`),
  ],
);
