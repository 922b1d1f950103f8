import type { ClaimedEvent } from "./types.ts";

export interface Subscription {
  /** Stable name: part of job URLs and deduplication ids, so never rename a live one. */
  name: string;
  /** Event-type globs: `*` matches any run of characters, e.g. `corpus.note.*`, `supplier.*`, `*`. */
  types: readonly string[];
  /**
   * Opt-in: within one claimed batch, one job per subject, for the latest event.
   * Only for subscribers that re-read current state; two events are two facts to anyone else.
   */
  coalesce?: boolean;
  /** QStash delivery retries for this subscription's jobs. */
  retries?: number;
  /** Narrower match than types. A throw is that event's own error and counts against it. */
  filter?: (event: ClaimedEvent) => boolean;
}

/** A subscription name (and so a job route segment), as a regex source for route patterns. */
export const SUBSCRIPTION_NAME = "[a-z][a-z0-9_.-]*";
const NAME = new RegExp(`^${SUBSCRIPTION_NAME}$`);
// Lower case, as every event type is (record.ts): `Order.*` was taken and matched
// nothing, for a subscription and for a webhook endpoint alike.
const TYPE_GLOB = /^[a-z0-9_.*-]+$/;

/** What a type glob may hold, said where one is refused. */
export const TYPE_GLOB_RULE =
  "must be an event-type glob: lower-case letters, digits, `_`, `.`, `-` and `*`, as event types are, e.g. `supplier.*`";

/**
 * Whether a string is an event-type glob (`supplier.*`, `*`): the one rule for
 * subscriptions, webhook endpoints and the filters of event listings.
 */
export function isTypeGlob(glob: string): boolean {
  return TYPE_GLOB.test(glob);
}

/**
 * Checks a subscription list once, at start-up: its names, and that each type is a
 * glob an event type can match (not that any event of that type is ever recorded:
 * the app keeps no list of its types, so `orders.*` for `order.placed` events
 * passes and matches nothing). The list keeps its literal names, so a record of job handlers
 * can be typed by them (`SubscriptionName`): a subscription without one does not compile.
 */
export function defineSubscriptions<const T extends readonly Subscription[]>(list: T): T {
  const seen = new Set<string>();
  for (const s of list) {
    if (!NAME.test(s.name)) throw new Error(`subscription name "${s.name}" must match ${NAME}`);
    if (s.name.startsWith("_")) throw new Error(`subscription name "${s.name}" is reserved`);
    if (seen.has(s.name)) throw new Error(`subscription "${s.name}" is declared twice`);
    seen.add(s.name);
    if (s.types.length === 0) throw new Error(`subscription "${s.name}" matches no event types`);
    for (const t of s.types) {
      if (!isTypeGlob(t)) throw new Error(`subscription "${s.name}": type "${t}" ${TYPE_GLOB_RULE}`);
    }
    if (s.retries !== undefined && (!Number.isInteger(s.retries) || s.retries < 0)) {
      throw new Error(`subscription "${s.name}": retries must be a non-negative integer`);
    }
  }
  return list;
}

/** The names of a list made by `defineSubscriptions`, e.g. `"corpus.index" | "notify.mail"`. */
export type SubscriptionName<T extends readonly Subscription[]> = T[number]["name"];

const globCache = new Map<string, string[]>();

/**
 * Whether `type` matches `glob` (`*` for any run of characters). Matched by its parts
 * between stars, each found leftmost after the one before: linear in the type. It was
 * a regex of `.*` per star, which backtracks exponentially on a failing match, and an
 * endpoint's `*************z` (an operator's typo) took seconds per event, past a
 * Worker's CPU limit for every webhook.fanout job of its scope.
 */
export function matchesGlob(glob: string, type: string): boolean {
  let parts = globCache.get(glob);
  if (!parts) {
    parts = glob.split("*");
    globCache.set(glob, parts);
  }
  const first = parts[0]!;
  if (parts.length === 1) return type === first;
  const last = parts[parts.length - 1]!;
  if (type.length < first.length + last.length || !type.startsWith(first) || !type.endsWith(last))
    return false;
  let at = first.length;
  const end = type.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i]!;
    if (part === "") continue;
    const found = type.indexOf(part, at);
    if (found < 0 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

export function matchesType(subscription: Subscription, type: string): boolean {
  // A loop, not some(): called per subscription for every claimed row, and the
  // closure some() takes was one allocation each time.
  for (const glob of subscription.types) if (matchesGlob(glob, type)) return true;
  return false;
}

/** Finds a subscription by name, e.g. for `/jobs/<subscription>`. */
export function findSubscription(list: readonly Subscription[], name: string): Subscription | undefined {
  return list.find((s) => s.name === name);
}
