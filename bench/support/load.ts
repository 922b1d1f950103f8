/** Closed-loop HTTP load: `concurrency` callers, each sending its next request when its last is answered. */
export interface LoadResult {
  /** Wall time from the first request to the last answer. */
  ms: number;
  /** Answered requests per second over that time. */
  perSecond: number;
  /** Each request's time to its answer (body read), in milliseconds, in completion order. */
  latencies: number[];
  /** Requests whose answer `send` judged wrong (it returned false). */
  failed: number;
}

export async function runLoad(
  total: number,
  concurrency: number,
  send: (i: number) => Promise<boolean>,
): Promise<LoadResult> {
  const latencies: number[] = [];
  let failed = 0;
  let next = 0;
  const started = performance.now();
  const caller = async () => {
    while (next < total) {
      const i = next++;
      const at = performance.now();
      const ok = await send(i);
      latencies.push(performance.now() - at);
      if (!ok) failed++;
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, caller));
  const ms = performance.now() - started;
  return { ms, perSecond: (total * 1000) / ms, latencies, failed };
}
