import { describe, expect, it } from "vitest";
import { distribution, median, percentile, quantile, summarize } from "../../bench/support/stats.ts";

describe("bench stats", () => {
  it("takes the median of odd and even counts without sorting the input in place", () => {
    const input = [5, 1, 3];
    expect(median(input)).toBe(3);
    expect(input).toEqual([5, 1, 3]);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
  });

  it("interpolates percentiles between closest ranks", () => {
    const values = Array.from({ length: 101 }, (_, i) => i); // 0..100
    expect(percentile(values, 50)).toBe(50);
    expect(percentile(values, 99)).toBe(99);
    expect(percentile(values, 0)).toBe(0);
    expect(percentile(values, 100)).toBe(100);
    expect(quantile([10, 20], 0.25)).toBe(12.5);
  });

  it("refuses empty input and out-of-range quantiles", () => {
    expect(() => median([])).toThrow(RangeError);
    expect(() => quantile([1], 1.5)).toThrow(RangeError);
    expect(() => summarize([])).toThrow(RangeError);
  });

  it("summarizes repetitions as median, min and max, keeping the runs in order", () => {
    expect(summarize([3, 9, 1])).toEqual({ median: 3, min: 1, max: 9, runs: [3, 9, 1] });
  });

  it("describes a latency distribution", () => {
    const samples = Array.from({ length: 1000 }, (_, i) => i + 1);
    const d = distribution(samples);
    expect(d.count).toBe(1000);
    expect(d.p50).toBeCloseTo(500.5);
    expect(d.p95).toBeCloseTo(950.05);
    expect(d.p99).toBeCloseTo(990.01);
    expect(d.max).toBe(1000);
  });
});
