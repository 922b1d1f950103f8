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
  /** Coalesce for subscriptions that opted in. Off when a batch is retried row by row. */
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
  subscriptions: Subscription[],
  options: PlanOptions,
): RowPlan[] {
  const plans = events.map((event) => matchRow(event, subscriptions));

  for (const sub of subscriptions) {
    const coalescing = options.coalesce && sub.coalesce === true;
    const latestBySubject = new Map<string, RowPlan>();
    // Walk newest first so the first plan seen for a subject is the one that gets the job.
    for (let i = plans.length - 1; i >= 0; i--) {
      const plan = plans[i]!;
      if (plan.error || !plan.matched.has(sub.name)) continue;
      if (!coalescing) {
        plan.jobs.push(job(sub, plan.event, []));
        continue;
      }
      const key = `${plan.event.scope ?? ""}\u0000${plan.event.subject}`;
      const latest = latestBySubject.get(key);
      if (latest) {
        plan.fanout[sub.name] = { coalescedInto: latest.event.id };
        latest.jobs.find((j) => j.subscription === sub.name)!.body.coalesced.unshift(plan.event.id);
      } else {
        latestBySubject.set(key, plan);
        plan.jobs.push(job(sub, plan.event, []));
      }
    }
  }

  for (const plan of plans) {
    if (plan.error) continue;
    // Jobs were pushed newest-first per subscription; keep them in subscription order.
    plan.jobs.sort((a, b) => order(subscriptions, a) - order(subscriptions, b));
    const tooLarge = plan.jobs.find(
      (j) => encoder.encode(JSON.stringify(j.body)).length > options.maxJobBytes,
    );
    if (tooLarge) {
      plan.error = errorMessage(
        new EventError(
          `job for ${tooLarge.subscription} exceeds ${options.maxJobBytes} bytes (payload too large)`,
        ),
      );
      plan.jobs = [];
    }
  }
  return plans.map(({ matched: _matched, ...plan }) => plan);
}

function matchRow(event: ClaimedEvent, subscriptions: Subscription[]): RowPlan & { matched: Set<string> } {
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

function order(subscriptions: Subscription[], job: Job): number {
  return subscriptions.findIndex((s) => s.name === job.subscription);
}
