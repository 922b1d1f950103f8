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
 */
export function planBatch(
  events: ClaimedEvent[],
  subscriptions: readonly Subscription[],
  options: PlanOptions,
): RowPlan[] {
  const plans = events.map((event) => matchRow(event, subscriptions));
  // Each event's part of its job bodies, serialised once for all its jobs.
  const eventJson = new Map<RowPlan, string>();

  // First every row's own jobs, sized on their own: a row that cannot publish is
  // decided before coalescing, so no event is ever folded into a job that is dropped.
  for (const plan of plans) {
    if (plan.error) continue;
    const json = serialiseEvent(plan.event);
    eventJson.set(plan, json);
    plan.jobs = subscriptions
      .filter((sub) => plan.matched.has(sub.name))
      .map((sub) => job(sub, plan.event, json, []));
    const tooLarge = plan.jobs.find((j) => tooBig(j.json!, options.maxJobBytes));
    if (tooLarge) {
      plan.error = errorMessage(
        new EventError(
          `job for ${tooLarge.subscription} exceeds ${options.maxJobBytes} bytes (payload too large)`,
        ),
      );
      plan.jobs = [];
    }
  }

  if (!options.coalesce) return plans.map(({ matched: _matched, ...plan }) => plan);

  // Then coalesce, per subject, only among rows that will publish.
  for (const sub of subscriptions) {
    if (sub.coalesce !== true) continue;
    const bySubject = new Map<string, RowPlan[]>();
    for (const plan of plans) {
      if (plan.error || !plan.matched.has(sub.name)) continue;
      const key = `${plan.event.scope ?? ""}\u0000${plan.event.subject}`;
      const group = bySubject.get(key) ?? [];
      group.push(plan);
      bySubject.set(key, group);
    }
    for (const group of bySubject.values()) {
      if (group.length < 2) continue;
      const latest = group[group.length - 1]!;
      const earlier = group.slice(0, -1);
      const latestJob = latest.jobs.find((j) => j.subscription === sub.name)!;
      const coalesced = job(
        sub,
        latest.event,
        eventJson.get(latest)!,
        earlier.map((p) => p.event.id),
      );
      // Naming the covered ids makes the job larger; if it no longer fits, every
      // event keeps its own job (each was checked to fit) rather than one failing for all.
      if (tooBig(coalesced.json!, options.maxJobBytes)) continue;
      latest.jobs = latest.jobs.map((j) => (j === latestJob ? coalesced : j));
      for (const plan of earlier) {
        plan.jobs = plan.jobs.filter((j) => j.subscription !== sub.name);
        plan.fanout[sub.name] = { coalescedInto: latest.event.id };
      }
    }
  }
  return plans.map(({ matched: _matched, ...plan }) => plan);
}

function matchRow(
  event: ClaimedEvent,
  subscriptions: readonly Subscription[],
): RowPlan & { matched: Set<string> } {
  const matched = new Set<string>();
  const plan = { event, jobs: [] as Job[], fanout: {} as Fanout, matched };
  for (const sub of subscriptions) {
    if (!matchesType(sub, event.type)) continue;
    try {
      if (sub.filter && !sub.filter(event)) continue;
    } catch (error) {
      return {
        ...plan,
        error: errorMessage(new EventError(`filter of ${sub.name} threw: ${errorMessage(error)}`)),
      };
    }
    matched.add(sub.name);
  }
  return plan;
}

/**
 * The job's body is serialised here, once, by concatenation around the event's
 * part; `body` is parsed back only if someone reads it (tests, custom publishers).
 * The key order is JobBody's, as JSON.stringify(body) would give.
 */
function job(sub: Subscription, event: ClaimedEvent, eventJson: string, coalesced: string[]): Job {
  const json = `{"subscription":${JSON.stringify(sub.name)},"event":${eventJson},"coalesced":${JSON.stringify(coalesced)}}`;
  return new PlannedJob(sub.name, `${event.id}:${sub.name}`, json, sub.retries);
}

class PlannedJob implements Job {
  #body: JobBody | undefined;
  readonly retries?: number;

  constructor(
    readonly subscription: string,
    readonly deduplicationId: string,
    readonly json: string,
    retries: number | undefined,
  ) {
    if (retries !== undefined) this.retries = retries;
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
 * third of the limit cannot exceed it and is not encoded to be counted.
 */
function tooBig(json: string, maxBytes: number): boolean {
  if (json.length * 3 <= maxBytes) return false;
  return encoder.encode(json).length > maxBytes;
}
