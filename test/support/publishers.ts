import { PublishError, type Job, type PublishedJob, type Publisher } from "../../src/outbox/index.ts";

/**
 * An in-memory transport that records every job it accepts, so a test can count
 * publishes per (event, subscription). `fail` decides, per call, whether to throw.
 */
export class RecordingPublisher implements Publisher {
  readonly accepted: Job[] = [];
  readonly calls: number[] = [];
  fail: ((jobs: Job[]) => Error | undefined) | undefined;
  /** Runs after the jobs were accepted, before the relay sees the answer. */
  afterAccept: ((jobs: Job[]) => Promise<void>) | undefined;
  delayMs = 0;
  private n = 0;

  async publish(jobs: Job[], signal: AbortSignal): Promise<PublishedJob[]> {
    this.calls.push(jobs.length);
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    signal.throwIfAborted();
    const error = this.fail?.(jobs);
    if (error) throw error;
    this.accepted.push(...jobs);
    const answers = jobs.map(() => ({ messageId: `msg_${++this.n}`, deduplicated: false }));
    await this.afterAccept?.(jobs);
    return answers;
  }

  countsByDeduplicationId(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const job of this.accepted)
      counts.set(job.deduplicationId, (counts.get(job.deduplicationId) ?? 0) + 1);
    return counts;
  }

  /** Event ids in the order their jobs for `subscription` were accepted. */
  eventIds(subscription: string): string[] {
    return this.accepted.filter((j) => j.subscription === subscription).map((j) => j.body.event.id);
  }
}

export const outage = (status = 503) => new PublishError(`transport down (${status})`, "outage", status);
export const rejected = (why = "invalid message") => new PublishError(`QStash 400: ${why}`, "rejected", 400);
