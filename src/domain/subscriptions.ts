import { defineSubscriptions } from "../outbox/index.ts";

/**
 * The reference app's subscriptions. Each name is also its job route
 * (`POST /jobs/<name>`) and part of every deduplication id: never rename one
 * that has jobs in flight.
 */
export const subscriptions = defineSubscriptions([
  // Re-reads the note's current state, so the latest change covers the earlier ones.
  { name: "corpus.index", types: ["corpus.note.*"], coalesce: true, retries: 5 },
  // Two events are two facts to a webhook endpoint: never coalesced.
  { name: "webhook.fanout", types: ["*"], retries: 5 },
  { name: "notify.mail", types: ["supplier.*"], retries: 5 },
]);
