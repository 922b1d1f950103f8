import { sql } from "drizzle-orm";
import {
  bigint,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
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
    // Time-ordered (UUIDv7, migration 0007). Unique, and found by id, through
    // events_browse's index on its copy: an index here took a new entry for every row
    // the mark updates (a non-HOT update), plus a uniqueness check against the row's
    // old version, 16 % of the ceiling statement's instructions (docs/adr/0021).
    id: uuid("id")
      .notNull()
      .default(sql`outbox_uuid_v7()`),
    type: text("type").notNull(),
    subject: text("subject").notNull(),
    scope: text("scope"),
    payload: jsonb("payload").notNull().default({}),
    // When the row was inserted, not when its transaction began (now()): a write that
    // waited for another's row lock commits after it but began before it, and its
    // event carried the earlier time, so one subject's events (and the webhooks'
    // `timestamp`, which receivers are told to order by) ran against commit order.
    createdAt: timestamp("created_at", tz)
      .notNull()
      .default(sql`clock_timestamp()`),
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
    // Only the relay's indexes. The mark is a non-HOT update (fanned_out_at is in the
    // claim index's predicate), so every index here gets a new entry for every row it
    // marks: what only the dashboard reads lives in events_browse and
    // outbox_fanned_minutes below, which the mark never updates (docs/adr/0016), and
    // so does the index on id (docs/adr/0021).
    // One state at a time: the state predicates (state.ts) rely on it.
    check("events_one_state", sql`fanned_out_at IS NULL OR poisoned_at IS NULL`),
  ],
);

/**
 * Every event's keys (its id and what the events page filters on), insert-only:
 * written with the event by the statement trigger on `events` (migration 0010), in
 * the writer's transaction, and deleted with it (retention, any DELETE, TRUNCATE).
 * Its indexes here cost a write one entry each, and the relay's mark nothing: on
 * `events` they cost every marked row a new entry (docs/adr/0013, 0016).
 */
export const eventsBrowse = pgTable(
  "events_browse",
  {
    // events.seq; no foreign key, whose check would cost every insert a look-up: the
    // triggers keep the two tables in step.
    seq: bigint("seq", { mode: "number" }).primaryKey(),
    // events.id: its unique index lives here, where no mark ever touches it, and
    // look-ups by id (GET /events/:id, receipts, requeue) go id → seq → events.
    id: uuid("id").notNull().unique(),
    type: text("type").notNull(),
    subject: text("subject").notNull(),
    scope: text("scope"),
    createdAt: timestamp("created_at", tz).notNull(),
  },
  (t) => [
    // Time ranges: `seq + 0` is seq hidden from the primary key, so the rows of a
    // time range recorded out of seq order are found by block-range pruning. Also the
    // overview's events-recorded-per-minute chart (created_at only).
    index("events_browse_seq_created_brin")
      .using("brin", sql`(seq + 0) int8_minmax_multi_ops`, t.createdAt.op("timestamptz_minmax_multi_ops"))
      .with({ pages_per_range: 16, autosummarize: true }),
    // Type globs are resolved to the types present by a loose scan of this index;
    // seq second, so a type's rows within a time range's seq band are one index range.
    index("events_browse_type_seq_idx").on(t.type, t.seq),
    // A tenant with few events (or none) would otherwise be a walk of the table.
    index("events_browse_scope_seq_idx").on(t.scope, t.seq),
    // One subject's events, newest first, in as many entries as the page shows.
    index("events_browse_subject_seq_idx").on(t.subject, t.seq),
  ],
);

/**
 * Events fanned out per minute, for the overview's chart: the mark adds its pass's
 * count to one row (one upsert per pass, not one index entry per event). `slot`
 * spreads concurrent passes over rows (the backend's pid modulo 16), so they
 * rarely wait for each other's row lock, which the upsert holds until the pass
 * commits. The chart sums the slots; the sweep deletes minutes past retention.
 */
export const fannedMinutes = pgTable(
  "outbox_fanned_minutes",
  {
    minute: timestamp("minute", tz).notNull(),
    slot: smallint("slot").notNull(),
    fanned: bigint("fanned", { mode: "number" }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.minute, t.slot] })],
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
    /** When the sweep posted it to ALERT_WEBHOOK_URL and was answered 2xx (ADR 0046); null until then. */
    notifiedAt: timestamp("notified_at", tz),
    /**
     * When a sweep took it for its notice: a lease, so two sweeps do not both post it,
     * and one that died before its answer (a cut-off run, a deploy) does not keep it.
     */
    noticeClaimedAt: timestamp("notice_claimed_at", tz),
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
    // One open delivery_failed alert per webhook endpoint, counting its failures
    // (ADR 0031): the failure statement folds into it with ON CONFLICT on this index.
    uniqueIndex("outbox_alerts_open_endpoint_failure_key")
      .on(sql`(details->>'endpointId')`)
      .where(sql`resolved_at IS NULL AND kind = 'webhook.delivery_failed'`),
    // One open lagging alert per webhook endpoint, raised and resolved by the sweep
    // (domain/webhooks/lag.ts); overlapping sweeps meet here.
    uniqueIndex("outbox_alerts_open_endpoint_lag_key")
      .on(sql`(details->>'endpointId')`)
      .where(sql`resolved_at IS NULL AND kind = 'webhook.endpoint_lagging'`),
    // One open failing alert per webhook endpoint, the same way (lag.ts).
    uniqueIndex("outbox_alerts_open_endpoint_failing_key")
      .on(sql`(details->>'endpointId')`)
      .where(sql`resolved_at IS NULL AND kind = 'webhook.endpoint_failing'`),
    // One open subscription.failing alert per subscription, raised and resolved by
    // the sweep (domain/job-failures/failing.ts); overlapping sweeps meet here.
    uniqueIndex("outbox_alerts_open_subscription_failing_key")
      .on(t.subscription)
      .where(sql`resolved_at IS NULL AND kind = 'subscription.failing'`),
    // One open subscription.backlogged alert per subscription, raised and resolved
    // by the sweep (domain/subscription-backlog.ts); overlapping sweeps meet here.
    uniqueIndex("outbox_alerts_open_subscription_backlog_key")
      .on(t.subscription)
      .where(sql`resolved_at IS NULL AND kind = 'subscription.backlogged'`),
    // One open job.failed alert per subscription, counting its jobs that ran out of
    // retries (ADR 0037): the failure statement folds into it with ON CONFLICT here.
    uniqueIndex("outbox_alerts_open_job_failed_key")
      .on(t.subscription)
      .where(sql`resolved_at IS NULL AND kind = 'job.failed'`),
    // One open event.poisoned alert per event type, counting its poisoned events
    // (ADR 0044): the relay's mark folds into it with ON CONFLICT here.
    uniqueIndex("outbox_alerts_open_event_poisoned_key")
      .on(sql`(details->>'type')`)
      .where(sql`resolved_at IS NULL AND kind = 'event.poisoned'`),
    // The canary's alerts (src/domain/canary.ts, ADR 0045): one open while jobs do
    // not arrive, raised and resolved by the sweep; one open per label of another
    // deployment whose canaries reach this Worker, counting them.
    uniqueIndex("outbox_alerts_open_jobs_not_arriving_key")
      .on(t.kind)
      .where(sql`resolved_at IS NULL AND kind = 'jobs.not_arriving'`),
    uniqueIndex("outbox_alerts_open_jobs_foreign_key")
      .on(sql`(details->>'label')`)
      .where(sql`resolved_at IS NULL AND kind = 'jobs.foreign'`),
    // The open alerts not yet posted to ALERT_WEBHOOK_URL, which the sweep reads each run.
    index("outbox_alerts_unnotified_idx")
      .on(t.id)
      .where(sql`notified_at IS NULL AND resolved_at IS NULL`),
    // An event's alerts, on its every view (operations.ts getEvent): without it each
    // read every alert kept, 110 ms for 30,000 (the month walkthrough).
    index("outbox_alerts_event_idx").on(t.eventId),
    // Retention deletes the alerts resolved longest ago (domain/retention.ts).
    index("outbox_alerts_resolved_idx")
      .on(t.resolvedAt)
      .where(sql`resolved_at IS NOT NULL`),
  ],
);
