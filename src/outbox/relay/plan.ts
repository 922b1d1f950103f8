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

  // First every row's own jobs, sized on their own: a row that cannot publish is
  // decided before coalescing, so no event is ever folded into a job that is dropped.
  for (const plan of plans) {
    if (plan.error) continue;
    plan.jobs = subscriptions
      .filter((sub) => plan.matched.has(sub.name))
      .map((sub) => job(sub, plan.event, []));
    const tooLarge = plan.jobs.find((j) => bytes(j) > options.maxJobBytes);
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
      const coalesced = {
        ...latestJob,
        body: { ...latestJob.body, coalesced: earlier.map((p) => p.event.id) },
      };
      // Naming the covered ids makes the job larger; if it no longer fits, every
      // event keeps its own job (each was checked to fit) rather than one failing for all.
      if (bytes(coalesced) > options.maxJobBytes) continue;
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

function job(sub: Subscription, event: ClaimedEvent, coalesced: string[]): Job {
  const body: JobBody = {
    subscription: sub.name,
    event: {
      id: event.id,
      seq: event.seq,
      type: event.type,
      subject: event.subject,
      scope: event.scope,
      payload: event.payload,
      createdAt: event.createdAt.toISOString(),
    },
    coalesced,
  };
  return {
    subscription: sub.name,
    deduplicationId: `${event.id}:${sub.name}`,
    body,
    ...(sub.retries === undefined ? {} : { retries: sub.retries }),
  };
}

function bytes(job: Job): number {
  return encoder.encode(JSON.stringify(job.body)).length;
}
