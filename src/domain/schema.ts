import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  check,
  customType,
  index,
  integer,
  jsonb,
  pgTable,
  smallint,
  text,
  timestamp,
  unique,
  uuid,
} from "drizzle-orm/pg-core";

const tz = { withTimezone: true, mode: "date" } as const;

/** Reference domain: notes whose watched columns are recorded as events by a trigger. */
export const corpusNotes = pgTable("corpus_notes", {
  id: uuid("id").primaryKey().defaultRandom(),
  scope: text("scope"),
  title: text("title").notNull(),
  body: text("body").notNull().default(""),
  tags: text("tags")
    .array()
    .notNull()
    .default(sql`'{}'::text[]`),
  createdAt: timestamp("created_at", tz).notNull().defaultNow(),
  // Not watched: touching it alone must not record an event.
  updatedAt: timestamp("updated_at", tz).notNull().defaultNow(),
});

export const supplierStatuses = ["created", "connected", "active"] as const;
export type SupplierStatus = (typeof supplierStatuses)[number];

/** Reference domain: suppliers, whose use cases record events explicitly with recordEvent. */
export const suppliers = pgTable(
  "suppliers",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    scope: text("scope"),
    name: text("name").notNull(),
    status: text("status").$type<SupplierStatus>().notNull().default("created"),
    connectedAt: timestamp("connected_at", tz),
    activatedAt: timestamp("activated_at", tz),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
  },
  (t) => [index("suppliers_scope_idx").on(t.scope)],
);

// Drizzle has no tsvector column; the value is only ever built and read in SQL.
const tsvector = customType<{ data: string }>({ dataType: () => "tsvector" });

/**
 * The search index over notes, maintained only by the `corpus.index` subscriber,
 * so it lags the notes by one fan-out. No foreign key: a deleted note leaves the
 * index when its `corpus.note.deleted` job runs, not inside the writer's
 * transaction. `source_event_seq` is the event the row was built for; an older
 * job arriving late (QStash does not promise order) never overwrites a newer row.
 */
export const corpusIndex = pgTable(
  "corpus_index",
  {
    noteId: uuid("note_id").primaryKey(),
    scope: text("scope"),
    title: text("title").notNull(),
    document: tsvector("document").notNull(),
    sourceEventSeq: bigint("source_event_seq", { mode: "number" }).notNull(),
    indexedAt: timestamp("indexed_at", tz).notNull().defaultNow(),
  },
  (t) => [
    index("corpus_index_document_idx").using("gin", t.document),
    index("corpus_index_scope_idx").on(t.scope),
  ],
);

/**
 * One row per mail `notify.mail` sends. QStash delivers at least once, so the
 * (subscription, event) key is what turns a retried job into a no-op instead of a
 * second mail.
 */
export const mailSends = pgTable(
  "mail_sends",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    subscription: text("subscription").notNull(),
    eventId: uuid("event_id").notNull(),
    recipient: text("recipient").notNull(),
    subjectLine: text("subject_line").notNull(),
    providerMessageId: text("provider_message_id"),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    sentAt: timestamp("sent_at", tz),
  },
  (t) => [
    unique("mail_sends_subscription_event_key").on(t.subscription, t.eventId),
    // Retention deletes the oldest first (retention.ts).
    index("mail_sends_created_at_idx").on(t.createdAt),
  ],
);

/**
 * Jobs that exhausted their QStash retries, as reported by the failure callback.
 * Keyed by QStash message id because the callback itself is delivered at least
 * once. `event_id` is null when the job body was not one of ours. An operator may
 * retry a failure once (job-failures/retry.ts): `retried_at` is claimed before the
 * new job is published (and cleared again if the publish fails), then
 * `retry_message_id` names the new job, and `retry_delivered_at` says when its
 * route took it.
 */
export const jobFailures = pgTable(
  "job_failures",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    messageId: text("message_id").notNull().unique(),
    subscription: text("subscription").notNull(),
    eventId: uuid("event_id"),
    status: integer("status"),
    body: text("body").notNull(),
    responseBody: text("response_body"),
    receivedAt: timestamp("received_at", tz).notNull().defaultNow(),
    retriedAt: timestamp("retried_at", tz),
    retryMessageId: text("retry_message_id"),
    // When the retry's job was answered 200 by its route: the retry worked. Null while
    // QStash still holds it (or its route never said), and for ever if it failed again.
    retryDeliveredAt: timestamp("retry_delivered_at", tz),
  },
  (t) => [
    index("job_failures_received_at_idx").on(t.receivedAt),
    // A failure recorded for a retried job names the failure it retried: found by this.
    index("job_failures_retry_message_id_idx").on(t.retryMessageId),
    // An event's page lists its failed jobs: since one alert counts a subscription's
    // failures (ADR 0037), the alert names only the latest event.
    index("job_failures_event_idx").on(t.eventId),
    // The job failures of one subscription, newest first, a page at a time: after one
    // subscriber's outage, the page an operator retries its failures from.
    index("job_failures_subscription_idx").on(t.subscription, t.id),
  ],
);

/**
 * Each subscription's current run of failed job attempts (ADR 0036), one row per
 * subscription: the job route counts every attempt its handler failed (QStash will
 * retry it), so the sweep can raise `subscription.failing` while QStash is still
 * retrying, hours before the first job runs out of retries. A run ends when a
 * retried job succeeds (`recovered_at`) or after a quiet spell; the next failure
 * starts a new one.
 */
export const subscriptionFailures = pgTable("subscription_failures", {
  subscription: text("subscription").primaryKey(),
  streakStartedAt: timestamp("streak_started_at", tz).notNull(),
  lastFailedAt: timestamp("last_failed_at", tz).notNull(),
  attempts: integer("attempts").notNull(),
  lastError: text("last_error").notNull(),
  recoveredAt: timestamp("recovered_at", tz),
});

/**
 * The retry QStash owes each failed job, as far as the job route can tell
 * (failing.ts, ADR 0038), one row per job (QStash keeps a job's message id across
 * its retries): written when an attempt fails with a retry left, removed when the
 * job's last attempt fails or a retry succeeds. A subscription's run of failures
 * goes on while any of its jobs' retries is due, and a quiet spell after; the sweep
 * drops rows whose time is long past (a job deleted in QStash never comes back).
 */
export const jobRetriesDue = pgTable(
  "job_retries_due",
  {
    messageId: text("message_id").primaryKey(),
    subscription: text("subscription").notNull(),
    dueAt: timestamp("due_at", tz).notNull(),
  },
  // The run's last retry due: the latest of its subscription's rows.
  (t) => [index("job_retries_due_subscription_idx").on(t.subscription, t.dueAt)],
);

/**
 * Each subscription's QStash wait list as the cron sweep last read it (ADR 0039):
 * how many of its jobs were due but held behind their flow-control limit, and since
 * when every reading has found some waiting (null once one finds none). A backlog there
 * is invisible to the database otherwise: the events are fanned out, their jobs
 * accepted, and nothing has run yet.
 */
export const subscriptionWaitLists = pgTable("subscription_wait_lists", {
  subscription: text("subscription").primaryKey(),
  waiting: integer("waiting").notNull(),
  /** The key's parallelism as QStash reports it (0 when it has none). */
  parallelism: integer("parallelism").notNull(),
  /** Its jobs QStash had under way. */
  inFlight: integer("in_flight").notNull(),
  paused: boolean("paused").notNull(),
  /** Since when every reading found jobs waiting; null when the last found none. */
  waitingSince: timestamp("waiting_since", tz),
  checkedAt: timestamp("checked_at", tz).notNull(),
  /** Since when sweeps could not read QStash (null once one does), and why: the reading above is that old. */
  unreadSince: timestamp("unread_since", tz),
  unreadError: text("unread_error"),
});

/**
 * The cron sweep's last run, one row (ADR 0040): when a sweep last finished, and
 * when one last failed and why. Everything the sweep does (repairing lost kicks,
 * raising every alert but the relay's own, retention) stops when its cron trigger
 * is missing or each run fails, and nothing else would say so: no alert can be
 * raised by the process that is not running. `retentionDays` is the RETENTION_DAYS
 * it ran with, so the CLI, which does not read the Worker's vars, can say it.
 */
export const sweepRuns = pgTable(
  "sweep_runs",
  {
    id: smallint("id").primaryKey().default(1),
    finishedAt: timestamp("finished_at", tz),
    durationMs: integer("duration_ms"),
    retentionDays: integer("retention_days"),
    failedAt: timestamp("failed_at", tz),
    failure: text("failure"),
    /** The cron expression the last finished sweep ran by: how late is late (sweepLateAfterMinutes). */
    cron: text("cron"),
  },
  (t) => [check("sweep_runs_singleton", sql`${t.id} = 1`)],
);

/**
 * The cron sweep's canary jobs (ADR 0045): a small job published through QStash to
 * this Worker's `/jobs/_canary`, every CANARY_EVERY_MINUTES while they arrive and
 * every CANARY_LATE_AFTER_MINUTES while one has not. Nothing else tells that jobs
 * stopped reaching the Worker (a PUBLIC_URL that is not this Worker, signing keys of
 * another account): writes still succeed and every view stays green. A canary's row
 * is how the route knows it is this database's, and not another deployment's that
 * publishes its jobs here.
 */
export const qstashCanaries = pgTable(
  "qstash_canaries",
  {
    id: uuid("id").primaryKey(),
    sentAt: timestamp("sent_at", tz).notNull().defaultNow(),
    /** QStash's message id, once it took the canary. */
    messageId: text("message_id"),
    /** Why QStash did not take it, when it did not. */
    publishError: text("publish_error"),
    arrivedAt: timestamp("arrived_at", tz),
    /** What QStash's dead letter says the Worker answered it (status, then body), when it failed. */
    answer: text("answer"),
  },
  (t) => [index("qstash_canaries_sent_idx").on(t.sentAt)],
);

/**
 * Tenant API keys for the domain routes. A key acts only within its scope (null
 * is a scope of its own, matching only null). Only a SHA-256 of the key is kept:
 * the key itself is shown once, when it is created. `prefix` is the key's first
 * characters, so an operator can tell keys apart in a list without the secret.
 */
export const apiKeys = pgTable(
  "api_keys",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    scope: text("scope"),
    name: text("name").notNull(),
    prefix: text("prefix").notNull(),
    keyHash: text("key_hash").notNull().unique(),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    lastUsedAt: timestamp("last_used_at", tz),
    revokedAt: timestamp("revoked_at", tz),
  },
  (t) => [index("api_keys_scope_idx").on(t.scope)],
);

/**
 * The writes a tenant sent with an `Idempotency-Key` (ADR 0035): per API key, the
 * key, what the request was (its fingerprint) and what it answered, so the same
 * request sent again is answered as the first was instead of writing twice. The
 * row is claimed and filled in the write's own transaction, so it exists exactly
 * when the write committed; `status` and `result` are null only inside that
 * transaction. Kept IDEMPOTENCY_KEY_HOURS, then the sweep deletes it.
 */
export const idempotencyKeys = pgTable(
  "idempotency_keys",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    apiKeyId: uuid("api_key_id")
      .notNull()
      .references(() => apiKeys.id, { onDelete: "cascade" }),
    key: text("key").notNull(),
    fingerprint: text("fingerprint").notNull(),
    status: integer("status"),
    location: text("location"),
    // The route's answer as first sent, byte for byte (text, not jsonb, which reorders keys).
    result: text("result"),
    eventIds: uuid("event_ids").array(),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
  },
  (t) => [
    unique("idempotency_keys_api_key_key").on(t.apiKeyId, t.key),
    index("idempotency_keys_created_idx").on(t.createdAt),
  ],
);

/**
 * Wrong dashboard passwords, one row each, counted per client address over a
 * window to lock a guesser out. In Postgres because a Worker keeps no memory
 * between requests. Old rows are only ever read inside the window; the cron sweep
 * deletes the rest (deleteStaleLoginFailures).
 */
export const loginFailures = pgTable(
  "dashboard_login_failures",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    client: text("client").notNull(),
    failedAt: timestamp("failed_at", tz).notNull().defaultNow(),
  },
  (t) => [index("dashboard_login_failures_client_idx").on(t.client, t.failedAt)],
);

export const webhookDeliveryStatuses = ["pending", "delivered", "failed"] as const;
export type WebhookDeliveryStatus = (typeof webhookDeliveryStatuses)[number];

/**
 * Where customers receive their events as signed webhooks. An endpoint belongs to
 * one scope and receives only that scope's events (null matches only null).
 * Secrets are stored encrypted (AES-GCM under WEBHOOK_SECRETS_KEY, see
 * webhooks/secret-box.ts): a database dump alone cannot sign a webhook. During a
 * rotation the previous secret keeps signing beside the new one until it expires.
 */
export const webhookEndpoints = pgTable(
  "webhook_endpoints",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    scope: text("scope"),
    url: text("url").notNull(),
    types: text("types")
      .array()
      .notNull()
      .default(sql`'{*}'::text[]`),
    description: text("description").notNull().default(""),
    enabled: boolean("enabled").notNull().default(true),
    disabledReason: text("disabled_reason"),
    disabledAt: timestamp("disabled_at", tz),
    secretBox: text("secret_box").notNull(),
    previousSecretBox: text("previous_secret_box"),
    previousSecretExpiresAt: timestamp("previous_secret_expires_at", tz),
    // Health the deliver handler keeps as it goes, so the auto-disable sweep and
    // the endpoint list need no scan of the attempt log.
    lastSuccessAt: timestamp("last_success_at", tz),
    failingSince: timestamp("failing_since", tz),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", tz).notNull().defaultNow(),
  },
  (t) => [
    index("webhook_endpoints_scope_idx")
      .on(t.scope)
      .where(sql`enabled`),
    check("webhook_endpoints_disabled_has_reason", sql`enabled OR disabled_reason IS NOT NULL`),
  ],
);

/**
 * One row per (endpoint, event): the unique key is what makes a replayed
 * `webhook.fanout` job create nothing twice. The body is the exact JSON that is
 * signed and POSTed, kept here so a redelivery still works after retention has
 * deleted the event. `lease_until` lets one of two concurrent deliveries of the
 * same job POST, and the other stand down.
 */
export const webhookDeliveries = pgTable(
  "webhook_deliveries",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    endpointId: uuid("endpoint_id")
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: "cascade" }),
    eventId: uuid("event_id").notNull(),
    eventType: text("event_type").notNull(),
    scope: text("scope"),
    body: text("body").notNull(),
    status: text("status").$type<WebhookDeliveryStatus>().notNull().default("pending"),
    attempts: integer("attempts").notNull().default(0),
    leaseUntil: timestamp("lease_until", tz),
    /** Upstash-Retried of the attempt holding the lease: a later attempt of the same job takes it over. */
    leaseRetried: integer("lease_retried"),
    lastAttemptAt: timestamp("last_attempt_at", tz),
    nextAttemptAt: timestamp("next_attempt_at", tz),
    deliveredAt: timestamp("delivered_at", tz),
    failedAt: timestamp("failed_at", tz),
    lastError: text("last_error"),
    /** QStash message id of the job currently carrying this delivery. */
    messageId: text("message_id"),
    createdAt: timestamp("created_at", tz).notNull().defaultNow(),
    /**
     * When a job was last asked for: at creation, and when an operator re-sends.
     * A row still pending without a message id well after this lost its publish
     * (the request or job died between the commit and the publish); the cron
     * sweep publishes it again (sweep.ts).
     */
    requestedAt: timestamp("requested_at", tz).notNull().defaultNow(),
  },
  (t) => [
    unique("webhook_deliveries_endpoint_event_key").on(t.endpointId, t.eventId),
    // Tiny: rows sit in it only between their commit and their publish.
    index("webhook_deliveries_unpublished_idx")
      .on(t.requestedAt)
      .where(sql`status = 'pending' AND message_id IS NULL`),
    // Retention deletes the oldest finished deliveries in bounded batches.
    index("webhook_deliveries_finished_created_idx")
      .on(t.createdAt)
      .where(sql`status <> 'pending'`),
    // The dashboard's "deliveries that gave up", newest first; failed rows are few.
    index("webhook_deliveries_failed_idx")
      .on(t.failedAt)
      .where(sql`status = 'failed'`),
    index("webhook_deliveries_endpoint_created_idx").on(t.endpointId, t.createdAt),
    // Per endpoint, the deliveries still waiting for their first attempt: the sweep's
    // lag check reads the oldest and counts them (webhooks/lag.ts). Rows leave it at
    // their first attempt.
    index("webhook_deliveries_unattempted_idx")
      .on(t.endpointId, t.createdAt)
      .where(sql`status = 'pending' AND attempts = 0`),
    // Per endpoint, its deliveries not finished yet, which its health counts
    // (delivery-log.ts endpointHealth); without it each endpoint's count read every
    // delivery the endpoint had (the month walkthrough: 300 ms an endpoint).
    index("webhook_deliveries_endpoint_pending_idx")
      .on(t.endpointId)
      .where(sql`status = 'pending'`),
    index("webhook_deliveries_event_idx").on(t.eventId),
    check("webhook_deliveries_status", sql`status IN ('pending', 'delivered', 'failed')`),
  ],
);

/** Every POST to an endpoint, kept like Svix's attempt log: what was asked and what came back. */
export const webhookAttempts = pgTable(
  "webhook_attempts",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedAlwaysAsIdentity(),
    deliveryId: uuid("delivery_id")
      .notNull()
      .references(() => webhookDeliveries.id, { onDelete: "cascade" }),
    attemptedAt: timestamp("attempted_at", tz).notNull().defaultNow(),
    durationMs: integer("duration_ms").notNull(),
    /**
     * Where this attempt was POSTed: the endpoint's URL at the time. An endpoint's URL
     * can change between attempts (an operator pointing a dead endpoint elsewhere and
     * recovering), and the log must say where each went. Null on rows from before
     * migration 0019.
     */
    url: text("url"),
    /** HTTP status, or null when no answer came (see `error`). */
    status: integer("status"),
    /** timeout, refused, dns, tls, redirect, network: why there was no usable answer. */
    error: text("error"),
    responseHeaders: jsonb("response_headers"),
    /** The first 2 KB of the response body. */
    responseBody: text("response_body"),
  },
  (t) => [
    index("webhook_attempts_delivery_idx").on(t.deliveryId, t.id),
    index("webhook_attempts_attempted_at_idx").on(t.attemptedAt),
  ],
);
