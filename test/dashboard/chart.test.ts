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
  const axis = /<div class="y-axis" aria-hidden="true">(.*?)<\/div>/.exec(html)![1]!;
  // Top to bottom, as the page draws them; bottom up here, as an axis is read.
  return [...axis.matchAll(/<span>([^<]*)<\/span>/g)].map((m) => m[1]!).reverse();
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

describe("dashboard chart for every reader", () => {
  const minutes = [0, 1, 2, 3].map((i) => new Date(Date.UTC(2026, 11, 4, 12, i)));
  const chart = async () =>
    String(
      await LineChart({
        title: "Webhook attempts per minute",
        minutes,
        series: [
          { label: "succeeded", swatch: "sw-b", values: [0, 4, 0, 7] },
          { label: "failed", swatch: "sw-c", values: [0, 1, 0, 0] },
        ],
      }).toString(),
    );

  it("gives its numbers as a table of the minutes that counted any, newest first", async () => {
    const html = await chart();
    expect(html).toContain(
      '<details class="minutes"><summary>Webhook attempts per minute, as a table</summary>',
    );
    const rows = [
      ...html.matchAll(
        /<tr><td class="time">([\d:]+)<\/td><td class="num">(\d+)<\/td><td class="num">(\d+)<\/td><\/tr>/g,
      ),
    ].map((m) => m.slice(1).join(" "));
    expect(rows).toEqual(["12:03 7 0", "12:01 4 1"]);
    expect(html).toMatch(
      /<th scope="col" class="num">succeeded<\/th><th scope="col" class="num">failed<\/th>/,
    );
  });

  it("tells its lines apart by more than colour, and draws the legend as the lines", async () => {
    const html = await chart();
    const lines = (html.match(/<polyline [^>]*>/g) ?? []).map((tag) => [
      /stroke="([^"]+)"/.exec(tag)?.[1],
      /stroke-dasharray="([^"]+)"/.exec(tag)?.[1],
    ]);
    expect(lines).toEqual([
      ["#079455", undefined],
      ["#f04438", "8 4"],
    ]);
    // Each legend entry is that line in small, not a coloured box forced colours would blank.
    expect(html).toMatch(
      /<svg class="swatch"[^>]*aria-hidden="true"><line [^>]*stroke="#f04438"[^>]*stroke-dasharray="8 4"/,
    );
    expect(html).not.toContain('<span class="swatch');
  });

  it("writes its axis labels as page text, which grows with the reader's text size, and says the times are UTC", async () => {
    const html = await chart();
    // In the SVG they were 10 of its 720 units: about 6 px on a phone, whatever the zoom.
    expect(html).not.toMatch(/<text[\s>]/);
    expect(/<div class="x-axis" aria-hidden="true">(.*?)<\/div>/.exec(html)?.[1]).toBe(
      "<span>12:00</span><span>12:01 UTC</span><span>12:03</span>",
    );
    expect(html).toMatch(/<svg viewBox="0 0 720 160" preserveAspectRatio="none" role="img"/);
    for (const tag of html.match(/<(polyline|line) [^>]*>/g)!.filter((t) => !t.includes('y1="4"')))
      expect(tag).toContain('vector-effect="non-scaling-stroke"');
  });
});
