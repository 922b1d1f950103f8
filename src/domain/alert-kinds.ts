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
  "subscription.backlogged",
  "webhook.delivery_failed",
  "webhook.endpoint_lagging",
  "webhook.endpoint_failing",
  "webhook.endpoint_disabled",
  "jobs.not_arriving",
  "jobs.foreign",
];

/** What a kind that is none of them is told. */
export const ALERT_KIND_RULE = `must be an alert kind: ${ALERT_KINDS.join(", ")}`;

export function isAlertKind(kind: string): boolean {
  return ALERT_KINDS.includes(kind);
}

/**
 * Alerts about a condition the cron sweep checks each time (a subscription that keeps
 * failing, an endpoint behind, the relay lagging or failing): resolved by hand while
 * the condition lasts, the next sweep raises them again. A walkthrough's operator was
 * not told so when resolving; every resolve (dashboard, CLI) now says it.
 */
const RAISED_AGAIN_WHILE_IT_LASTS: ReadonlySet<string> = new Set([
  "subscription.failing",
  "subscription.backlogged",
  "webhook.endpoint_lagging",
  "webhook.endpoint_failing",
  "relay.lagging",
  "relay.failing",
  "jobs.not_arriving",
]);

/** What resolving an alert of `kind` does not stop, or undefined when it does. */
export function raisedAgainNote(kind: string): string | undefined {
  if (RAISED_AGAIN_WHILE_IT_LASTS.has(kind))
    return "while what it reports lasts, the next sweep raises it again";
  // Raised by the canary route, not the sweep: the other deployment sends one every 5 min while it is late.
  if (kind === "jobs.foreign")
    return "while that deployment's canaries keep reaching this Worker, the next one raises it again";
  return undefined;
}
