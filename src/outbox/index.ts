// The event bus core. It imports nothing from the reference domain.
export * from "./types.ts";
export * from "./errors.ts";
export * from "./subscriptions.ts";
export * from "./publisher.ts";
export * from "./qstash-publisher.ts";
export * from "./record.ts";
export * from "./operations.ts";
export type { SqlPool, SqlClient } from "./sql.ts";
export { runPass, DEFAULTS as RELAY_DEFAULTS, type RelayOptions, type PassResult } from "./relay/pass.ts";
export { drain, type DrainOptions, type DrainResult } from "./relay/drain.ts";
export { POISON_AFTER } from "./relay/mark.ts";
export { BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS } from "./relay/backoff.ts";
export { events, alerts, relayState, type Fanout, type FanoutEntry } from "./schema.ts";
export * from "./receipt.ts";
export * from "./maintenance.ts";
export * from "./subscriber.ts";
