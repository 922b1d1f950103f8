/** Small, dependency-free statistics for the benchmark. Inputs are never mutated. */

/** The q-th quantile (0..1) by linear interpolation between closest ranks (numpy's default). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) throw new RangeError("quantile of no values");
  if (!(q >= 0 && q <= 1)) throw new RangeError(`quantile must be within [0, 1], got ${q}`);
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export const percentile = (values: readonly number[], p: number): number => quantile(values, p / 100);
export const median = (values: readonly number[]): number => quantile(values, 0.5);

/** A figure repeated several times: the median is what we report, min and max show the spread. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  /** Every repetition, in the order they ran. */
  runs: number[];
}

export function summarize(runs: readonly number[]): Summary {
  if (runs.length === 0) throw new RangeError("summary of no runs");
  return { median: median(runs), min: Math.min(...runs), max: Math.max(...runs), runs: [...runs] };
}

export interface Distribution {
  count: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export function distribution(samples: readonly number[]): Distribution {
  return {
    count: samples.length,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    p99: percentile(samples, 99),
    max: Math.max(...samples),
  };
}

/** Time of an async function in milliseconds, from a monotonic clock. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const start = performance.now();
  const value = await fn();
  return { ms: performance.now() - start, value };
}
