import { OUTBOX_ALERT_KINDS } from "../outbox/index.ts";

/**
 * Every alert kind this app raises: the outbox's own, then the app's (its jobs,
 * its subscriptions, its webhooks). A resolve by kind names one of these, so a
 * mistyped kind is said to be one rather than resolving nothing in silence (a
 * walkthrough's `alerts resolve --kind job.faild` exited 0). A test holds this list
 * to the kinds the code inserts.
 */
export const ALERT_KINDS: readonly string[] = [
  ...OUTBOX_ALERT_KINDS,
  "job.failed",
  "subscription.failing",
  "webhook.delivery_failed",
  "webhook.endpoint_lagging",
  "webhook.endpoint_disabled",
];

/** What a kind that is none of them is told. */
export const ALERT_KIND_RULE = `must be an alert kind: ${ALERT_KINDS.join(", ")}`;

export function isAlertKind(kind: string): boolean {
  return ALERT_KINDS.includes(kind);
}
