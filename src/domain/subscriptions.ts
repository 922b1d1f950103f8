import { z } from "zod";
import { defineSubscriptions, findSubscription } from "../outbox/index.ts";

/** The subscription whose job fans an event out to webhook endpoints; an event's views read its entry. */
export const WEBHOOK_FANOUT = "webhook.fanout";

/**
 * The reference app's subscriptions. Each name is also its job route
 * (`POST /jobs/<name>`) and part of every deduplication id: never rename one
 * that has jobs in flight.
 */
export const subscriptions = defineSubscriptions([
  // Re-reads the note's current state, so the latest change covers the earlier ones.
  { name: "corpus.index", types: ["corpus.note.*"], coalesce: true, retries: 5 },
  // Two events are two facts to a webhook endpoint: never coalesced.
  { name: WEBHOOK_FANOUT, types: ["*"], retries: 5 },
  { name: "notify.mail", types: ["supplier.*"], retries: 5 },
]);

/** The subscriptions' names, e.g. for a filter that must name one of them. */
export const SUBSCRIPTION_NAMES = subscriptions.map((s) => s.name);

/** Whether `name` is one of the subscriptions, and so a filter worth running. */
export function isSubscriptionName(name: string): boolean {
  return findSubscription(subscriptions, name) !== undefined;
}

/** What a filter naming no subscription is told. */
export const SUBSCRIPTION_RULE = `must name a subscription: ${SUBSCRIPTION_NAMES.join(", ")}`;

/** An optional filter by subscription (the admin routes' and the dashboard's `subscription`). */
export const subscriptionFilter = z
  .enum(SUBSCRIPTION_NAMES as [string, ...string[]], { message: SUBSCRIPTION_RULE })
  .optional();
