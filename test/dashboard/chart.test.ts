import { describe, expect, it } from "vitest";
import { LineChart, axisTop, tickLabel } from "../../src/worker/dashboard/chart.tsx";

/** The value axis' three labels, as a reader sees them. */
async function tickLabels(values: number[]): Promise<string[]> {
  const minutes = values.map((_, i) => new Date(Date.UTC(2026, 11, 4, 12, i)));
  const html = String(
    await LineChart({
      title: "t",
      minutes,
      series: [{ label: "fanned", swatch: "sw-a", values }],
    }).toString(),
  );
  return [...html.matchAll(/<text x="30"[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]!);
}

describe("dashboard chart axis", () => {
  it("ends the axis on a round number whose half is round too, never below the peak", () => {
    expect(axisTop(6001)).toBe(8000);
    expect(axisTop(3001)).toBe(4000);
    expect(axisTop(1000)).toBe(1000);
    expect(axisTop(21)).toBe(30);
    expect(axisTop(0)).toBe(2);
    for (let peak = 0; peak < 50_000; peak += 7) {
      const top = axisTop(peak);
      expect(top).toBeGreaterThanOrEqual(peak);
      expect(Number.isInteger(top / 2)).toBe(true);
      // Round: at most two significant digits.
      expect(Number(top.toPrecision(2))).toBe(top);
      // And not far above the peak: the line keeps most of the chart's height.
      if (peak >= 10) expect(top).toBeLessThanOrEqual(peak * 1.6);
    }
  });

  it("labels ticks short enough for the axis margin", () => {
    expect(tickLabel(950)).toBe("950");
    expect(tickLabel(2500)).toBe("2.5K");
    expect(tickLabel(40_000)).toBe("40K");
    expect(tickLabel(1_200_000)).toBe("1.2M");
  });

  it("draws 0, half and top of the axis for the series' peak", async () => {
    expect(await tickLabels([0, 6001, 120])).toEqual(["0", "4K", "8K"]);
    expect(await tickLabels([0, 0, 0])).toEqual(["0", "1", "2"]);
  });
});
