import { EventError, errorMessage } from "../errors.ts";
import type { Fanout } from "../schema.ts";
import { matchesType, type Subscription } from "../subscriptions.ts";
import type { ClaimedEvent, Job, JobBody } from "../types.ts";

export interface RowPlan {
  event: ClaimedEvent;
  /** Jobs this row publishes, in subscription order. */
  jobs: Job[];
  /** Filled in as jobs are published; coalesced entries are known at planning time. */
  fanout: Fanout;
  /** The row's own error: it publishes nothing and its attempts go up. */
  error?: string;
  /** The error is the row's whatever is tried again (its size): poisoned at once. */
  permanent?: boolean;
}

export interface PlanOptions {
  /** Coalesce for subscriptions that opted in. Off in a `rows` pass. */
  coalesce: boolean;
  /** A job body larger than this is the event's own error (QStash caps message size). */
  maxJobBytes: number;
}

const encoder = new TextEncoder();

/**
 * One job per (event, matching subscription); for a coalescing subscription, one
 * job per subject in this batch, for the latest event, naming the events it covers.
 * Never across batches: a later batch's event gets its own job.
 *
 * Written to allocate little: this runs for every claimed row of every pass, and
 * what it allocated (a Set of matched names and a copy of every plan, arrays from
 * filter and map per row, a Map and an array per subject) was half of what a relay
 * pass allocated and so most of its garbage collection (docs/performance.md, issue
 * 11's fourth round).
 */
export function planBatch(
  events: ClaimedEvent[],
  subscriptions: readonly Subscription[],
  options: PlanOptions,
): RowPlan[] {
  const plans: Plan[] = new Array(events.length);
  // Per row, the subscriptions whose type and filter matched, in subscription order:
  // the caller's own list when all of them did (the usual case), so no list per row.
  const matched: (readonly Subscription[])[] = new Array(events.length);
  // First every row's own jobs, sized on their own: a row that cannot publish is
  // decided before coalescing, so no event is ever folded into a job that is dropped.
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    const plan = (plans[i] = new Plan(event));
    const subs = (matched[i] = matchRow(plan, subscriptions));
    if (plan.error !== undefined) continue;
    // Each event's part of its job bodies, serialised once for all its jobs.
    const json = serialiseEvent(event);
    const jobs: Job[] = new Array(subs.length);
    for (let k = 0; k < subs.length; k++) {
      const sub = subs[k]!;
      const j = job(sub, event, json, NONE_COALESCED);
      if (tooBig(j, options.maxJobBytes)) {
        plan.error = errorMessage(
          new EventError(`job for ${sub.name} exceeds ${options.maxJobBytes} bytes (payload too large)`),
        );
        // Its size is the same at every try: five passes of backoff (about 30 s) only
        // delayed the alert (the alert walkthrough).
        plan.permanent = true;
        break;
      }
      jobs[k] = j;
    }
    if (plan.error === undefined) plan.jobs = jobs;
  }

  if (options.coalesce) {
    // Then coalesce, per subject, only among rows that will publish.
    for (const sub of subscriptions) {
      if (sub.coalesce === true) coalesce(plans, matched, sub, options.maxJobBytes);
    }
  }
  return plans;
}

const NONE_COALESCED: readonly string[] = [];
const NO_SUBSCRIPTIONS: readonly Subscription[] = [];

/** A row's plan: the same own properties a plain RowPlan object has. */
class Plan implements RowPlan {
  jobs: Job[] = [];
  fanout: Fanout = {};
  declare error?: string;
  declare permanent?: boolean;

  constructor(readonly event: ClaimedEvent) {}
}

/** The subscriptions the row matched; a filter that throws sets `plan.error` and matches none. */
function matchRow(plan: Plan, subscriptions: readonly Subscription[]): readonly Subscription[] {
  const event = plan.event;
  let matched: Subscription[] | undefined;
  for (let k = 0; k < subscriptions.length; k++) {
    const sub = subscriptions[k]!;
    let matches: boolean;
    try {
      matches = matchesType(sub, event.type) && (!sub.filter || sub.filter(event));
    } catch (error) {
      plan.error = errorMessage(new EventError(`filter of ${sub.name} threw: ${errorMessage(error)}`));
      return NO_SUBSCRIPTIONS;
    }
    // A list of its own only from the first subscription that did not match.
    if (!matches) matched ??= subscriptions.slice(0, k);
    else matched?.push(sub);
  }
  return matched ?? subscriptions;
}

/**
 * One job per subject for `sub`, for the latest of the batch's events of that
 * subject. Rows of one subject are chained by index rather than grouped in arrays.
 */
function coalesce(
  plans: Plan[],
  matched: (readonly Subscription[])[],
  sub: Subscription,
  maxJobBytes: number,
): void {
  // For each subject, the last row seen so far; for each row, the previous row of its subject.
  const last = new Map<string, number>();
  const previous = new Int32Array(plans.length).fill(-1);
  for (let i = 0; i < plans.length; i++) {
    const plan = plans[i]!;
    if (plan.error !== undefined || !matched[i]!.includes(sub)) continue;
    const key = `${plan.event.scope ?? ""}\u0000${plan.event.subject}`;
    const before = last.get(key);
    if (before !== undefined) previous[i] = before;
    last.set(key, i);
  }
  for (const latestIndex of last.values()) {
    if (previous[latestIndex] === -1) continue;
    const latest = plans[latestIndex]!;
    const earlier: Plan[] = [];
    for (let k = previous[latestIndex]!; k !== -1; k = previous[k]!) earlier.push(plans[k]!);
    earlier.reverse();
    const coalesced = job(
      sub,
      latest.event,
      serialiseEvent(latest.event),
      earlier.map((p) => p.event.id),
    );
    // Naming the covered ids makes the job larger; if it no longer fits, every
    // event keeps its own job (each was checked to fit) rather than one failing for all.
    if (tooBig(coalesced, maxJobBytes)) continue;
    latest.jobs[indexOfJob(latest.jobs, sub.name)] = coalesced;
    for (const plan of earlier) {
      plan.jobs.splice(indexOfJob(plan.jobs, sub.name), 1);
      plan.fanout[sub.name] = { coalescedInto: latest.event.id };
    }
  }
}

function indexOfJob(jobs: readonly Job[], subscription: string): number {
  for (let k = 0; k < jobs.length; k++) if (jobs[k]!.subscription === subscription) return k;
  return -1;
}

/**
 * The job's body is the event's part between a head and a tail written per
 * subscription, in JobBody's key order, as JSON.stringify(body) would give. It is
 * concatenated, and the deduplication id too, only when a publisher reads them (the
 * QStash publisher reads both once; a publisher that needs neither never pays for
 * them); `body` is parsed back only if someone reads it (tests, custom publishers).
 */
function job(
  sub: Subscription,
  event: ClaimedEvent,
  eventJson: string,
  coalesced: readonly string[],
): PlannedJob {
  const tail = coalesced.length === 0 ? NOT_COALESCED : `,"coalesced":${JSON.stringify(coalesced)}}`;
  return new PlannedJob(sub, event.id, bodyHead(sub), eventJson, tail);
}

const NOT_COALESCED = `,"coalesced":[]}`;
/** `{"subscription":<name>,"event":`, written once per subscription rather than once per job. */
const bodyHeads = new WeakMap<Subscription, string>();
function bodyHead(sub: Subscription): string {
  let head = bodyHeads.get(sub);
  if (head === undefined) {
    head = `{"subscription":${JSON.stringify(sub.name)},"event":`;
    bodyHeads.set(sub, head);
  }
  return head;
}

class PlannedJob implements Job {
  readonly subscription: string;
  readonly retries?: number;
  readonly #eventId: string;
  readonly #head: string;
  readonly #eventJson: string;
  readonly #tail: string;
  #deduplicationId: string | undefined;
  #json: string | undefined;
  #body: JobBody | undefined;

  constructor(sub: Subscription, eventId: string, head: string, eventJson: string, tail: string) {
    this.subscription = sub.name;
    if (sub.retries !== undefined) this.retries = sub.retries;
    this.#eventId = eventId;
    this.#head = head;
    this.#eventJson = eventJson;
    this.#tail = tail;
  }

  get deduplicationId(): string {
    return (this.#deduplicationId ??= `${this.#eventId}:${this.subscription}`);
  }

  get json(): string {
    return (this.#json ??= `${this.#head}${this.#eventJson}${this.#tail}`);
  }

  /** The body's length in UTF-16 code units, without writing it. */
  get length(): number {
    return this.#head.length + this.#eventJson.length + this.#tail.length;
  }

  get body(): JobBody {
    return (this.#body ??= JSON.parse(this.json) as JobBody);
  }
}

/**
 * The event as it appears in every job body. The relay's claim reads it whole, made
 * by Postgres (claim.ts); otherwise the payload goes in as the text the claim read
 * (jsonb's own output, valid JSON), so it is neither parsed nor stringified on the
 * way through.
 */
function serialiseEvent(event: ClaimedEvent): string {
  if (event.eventJson !== undefined) return event.eventJson;
  const { id, seq, type, subject, scope, payloadJson } = event;
  const createdAt = event.createdAt.toISOString();
  if (payloadJson === undefined) {
    return JSON.stringify({ id, seq, type, subject, scope, payload: event.payload, createdAt });
  }
  const head = JSON.stringify({ id, seq, type, subject, scope });
  return `${head.slice(0, -1)},"payload":${payloadJson},"createdAt":"${createdAt}"}`;
}

/**
 * UTF-8 takes at most 3 bytes per UTF-16 code unit, so a body whose length is a
 * third of the limit cannot exceed it and is neither written nor encoded to be counted.
 */
function tooBig(job: PlannedJob, maxBytes: number): boolean {
  if (job.length * 3 <= maxBytes) return false;
  return encoder.encode(job.json).length > maxBytes;
}
