// The event bus core's public API: what the Worker, the CLI and the domain use,
// by name, so a helper added to a module stays internal until someone decides
// to publish it. The core imports nothing from the domain (enforced by ESLint).

// Events and how they are recorded (guarantee 1).
export type { ClaimedEvent, Job, JobBody, PublishedJob } from "./types.ts";
export { recordEvent, InvalidEventError, type EventInput, type RecordedEvent } from "./record.ts";
export { events, alerts, relayState, type Fanout, type FanoutEntry } from "./schema.ts";

// Subscriptions and the jobs they receive.
export {
  defineSubscriptions,
  findSubscription,
  isTypeGlob,
  TYPE_GLOB_RULE,
  matchesGlob,
  SUBSCRIPTION_NAME,
  type Subscription,
  type SubscriptionName,
} from "./subscriptions.ts";
export {
  runJob,
  jobFailure,
  parseJobBody,
  NonRetryableError,
  type JobOutcome,
  type JobFailure,
  type JobContext,
  type JobHandler,
} from "./subscriber.ts";

// Transport.
export { createNullPublisher, type Publisher } from "./publisher.ts";
export {
  createQStashPublisher,
  QSTASH_BATCH_LIMITS,
  jobUrl,
  failureCallbackUrl,
  qstashClient,
  qstashAnswerWithin,
  QSTASH_ANSWER_TIMEOUT_MS,
  qstashGet,
  flowControlFor,
  subscriptionFlowControl,
  deploymentLabel,
  checkedLabel,
  asPublishError,
  publishAdvice,
  QSTASH_LABEL,
  JOBS_PATH,
  FAILURE_CALLBACK_PATH,
} from "./qstash-publisher.ts";
export {
  PublishError,
  InvalidInputError,
  databaseMisconfigurationOf,
  withCause,
  messageWithCode,
  queryFailureText,
  type DatabaseMisconfiguration,
  type FailureKind,
} from "./errors.ts";

// The relay.
export type { Queryable, QueryCallback, SqlPool, SqlClient } from "./sql.ts";
export { keysetPage } from "./sql.ts";
export {
  runPass,
  openPasses,
  type PassSession,
  type RelayOptions,
  type PassResult,
  type FannedEvent,
} from "./relay/pass.ts";
export { drain, type DrainOptions, type DrainResult } from "./relay/drain.ts";
export { RELAY_POLICY, type ExponentialBackoff } from "./relay/policy.ts";

// Where an event stands.
export { EVENT_STATES, STATE_SQL, isEventState, stateOf, type EventState } from "./state.ts";

// Receipts, operators and maintenance.
export {
  readReceipt,
  awaitFanout,
  receiptFromKick,
  inJsonbOrder,
  type Receipt,
  type ReceiptEntry,
  type AwaitOptions,
} from "./receipt.ts";
export {
  assertEventId,
  getEvent,
  getScopedEvent,
  MAX_LIST_LIMIT,
  listAlerts,
  alertsPage,
  type AlertListOptions,
  type AlertPage,
  requeue,
  requeuePoisoned,
  requeuePoisonedInRounds,
  countPoisoned,
  countedByPoisonedAlert,
  REQUEUE_POISONED_BATCH,
  endRelayBackoff,
  relayBackoff,
  stats,
  UUID_PATTERN,
  isUuid,
  IDENTITY_ID_DIGITS,
  mergedInto,
  mergedText,
  type AlertRow,
  type EventRow,
  type Stats,
} from "./operations.ts";
export {
  browseEvents,
  listEvents,
  PAGE_PAYLOAD_BYTES,
  type BrowseOptions,
  type EventFilter,
  type EventPage,
} from "./browse.ts";
export {
  errorFingerprint,
  poisonedGroups,
  poisonedIdsWithFingerprint,
  GROUP_SCAN_LIMIT,
  type PoisonedGroup,
  type PoisonedGroups,
} from "./poison-groups.ts";
export { eventsPerMinute, type MinuteCount } from "./throughput.ts";
export { resolveAlerts, resolveAlert, openAlertKinds, OUTBOX_ALERT_KINDS } from "./alert-resolution.ts";
export {
  deleteOldFannedEvents,
  EVENT_GONE_HINT,
  moreRetentionBatches,
  evaluateAlerts,
  vacuumEventsIfNeeded,
  type RetentionOptions,
  type VacuumOptions,
  type VacuumResult,
  type AlertThresholds,
} from "./maintenance.ts";
