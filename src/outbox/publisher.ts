import type { Job, PublishedJob } from "./types.ts";

/**
 * Where planned jobs go. The relay calls `publish` inside its claim transaction,
 * so an implementation must be idempotent per deduplication id and must honour
 * `signal`: a pass that gives up must not leave a publish running unbounded.
 * Answers one PublishedJob per job, in order. Throws PublishError (or anything
 * else, which counts as an outage).
 */
export interface Publisher {
  publish(jobs: Job[], signal: AbortSignal): Promise<PublishedJob[]>;
}

/** Accepts everything and sends nothing: for benchmarks and dry runs. */
export function createNullPublisher(): Publisher {
  let n = 0;
  return {
    async publish(jobs) {
      return jobs.map(() => ({ messageId: `null_${++n}`, deduplicated: false }));
    },
  };
}
