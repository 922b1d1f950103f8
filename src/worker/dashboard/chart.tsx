export interface Series {
  label: string;
  /** Its colour, in the chart and its legend. */
  swatch: "sw-a" | "sw-b" | "sw-c";
  values: number[];
}

/** Each at least 3:1 against the card's white (WCAG 1.4.11): the green was 2.6. */
const COLOURS = { "sw-a": "#2557d6", "sw-b": "#079455", "sw-c": "#f04438" } as const;

/**
 * A chart's later lines are dashed, so its two series differ by more than colour (a
 * red and a green line are 1.2:1 apart, one for the other to a red–green colour
 * blindness); the legend draws each line as the chart does, in SVG, which forced
 * colours leave alone (the span backgrounds it drew before vanished there).
 */
// In screen pixels (non-scaling strokes): the first line wide enough to show the
// dashed one drawn on top of it where both are equal.
const DASHES = [undefined, "8 4", "3 3"] as const;
const strokeWidth = (i: number) => String(Math.max(2, 5 - i * 2.5));

// The plot's own units: the SVG stretches to the card's width and a height set in rem
// (preserveAspectRatio="none"), its strokes kept in screen pixels. Its labels are HTML
// around it: inside the SVG they were drawn at 10 of 720 units, about 6 px on a phone,
// and a browser's text zoom left them as they were (WCAG 1.4.4, the dashboard walkthrough).
const W = 720;
const H = 160;

/** Multiples of a power of ten that an axis may end on: its middle tick is then round too. */
const NICE = [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];

/**
 * The top of the value axis for a series peaking at `max`: the smallest round number
 * at or above it whose half is a whole round number, so the three ticks read like
 * 0 / 3,000 / 6,000 rather than 0 / 3,001 / 6,001.
 */
export function axisTop(max: number): number {
  const half = Math.max(1, max / 2);
  const power = 10 ** Math.floor(Math.log10(half));
  const step = NICE.find((m) => m * power >= half - 1e-9) ?? 10;
  // Below 10 the half must stay a whole count: 1.5 of an event is no tick.
  return 2 * Math.max(Math.ceil(step * power), 1);
}

const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });

/** A tick label that fits the axis' margin: 950, 2.5K, 40K, 1.2M. */
export function tickLabel(value: number): string {
  return value < 1000 ? String(value) : compact.format(value);
}

/**
 * A line chart as inline SVG: no script, no library, and presentation
 * attributes rather than style="", which the CSP forbids. One point per minute.
 */
export function LineChart({ title, minutes, series }: { title: string; minutes: Date[]; series: Series[] }) {
  const max = axisTop(Math.max(0, ...series.flatMap((s) => s.values)));
  const n = Math.max(1, minutes.length - 1);
  const x = (i: number) => (i / n) * W;
  const y = (v: number) => (1 - v / max) * H;
  const ticks = [max, max / 2, 0];
  const label = (d: Date | undefined) => (d ? d.toISOString().slice(11, 16) : "");
  return (
    <figure class="chart">
      <div class="plot">
        {/* The table below carries the numbers for a screen reader; these are for the eye. */}
        <div class="y-axis" aria-hidden="true">
          {ticks.map((t) => (
            <span>{tickLabel(t)}</span>
          ))}
        </div>
        <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={title}>
          <title>{title}</title>
          {ticks.map((t) => (
            <line
              x1="0"
              x2={W}
              y1={y(t)}
              y2={y(t)}
              stroke="#e5e7eb"
              stroke-width="1"
              vector-effect="non-scaling-stroke"
            />
          ))}
          {/* Later series are drawn thinner on top, so equal values still show both lines. */}
          {series.map((s, i) => (
            <polyline
              fill="none"
              stroke={COLOURS[s.swatch]}
              stroke-width={strokeWidth(i)}
              stroke-dasharray={DASHES[i]}
              stroke-linejoin="round"
              vector-effect="non-scaling-stroke"
              points={s.values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}
            />
          ))}
        </svg>
        <div class="x-axis" aria-hidden="true">
          <span>{label(minutes[0])}</span>
          <span>{`${label(minutes[Math.floor(n / 2)])} UTC`}</span>
          <span>{label(minutes[n])}</span>
        </div>
      </div>
      <figcaption class="legend">
        {series.map((s, i) => (
          <span>
            <svg class="swatch" viewBox="0 0 22 8" width="22" height="8" aria-hidden="true">
              <line
                x1="0"
                y1="4"
                x2="22"
                y2="4"
                stroke={COLOURS[s.swatch]}
                stroke-width={strokeWidth(i)}
                stroke-dasharray={DASHES[i]}
              />
            </svg>
            {`${s.label} (${s.values.reduce((a, b) => a + b, 0)} in the hour)`}
          </span>
        ))}
      </figcaption>
      <MinuteTable title={title} minutes={minutes} series={series} />
    </figure>
  );
}

/**
 * The chart's numbers as a table, for whoever cannot see the lines (WCAG 1.1.1): the
 * minutes that counted anything, newest first, collapsed under the chart.
 */
function MinuteTable({ title, minutes, series }: { title: string; minutes: Date[]; series: Series[] }) {
  const rows = minutes
    .map((minute, i) => ({ minute, values: series.map((s) => s.values[i] ?? 0) }))
    .filter((r) => r.values.some((v) => v > 0))
    .reverse();
  return (
    <details class="minutes">
      <summary>{`${title}, as a table`}</summary>
      {rows.length === 0 ? (
        <p class="muted">Nothing in the hour.</p>
      ) : (
        <table>
          <caption class="unseen">{`${title}, the minutes that counted any, newest first`}</caption>
          <tr>
            <th scope="col">minute (UTC)</th>
            {series.map((s) => (
              <th scope="col" class="num">
                {s.label}
              </th>
            ))}
          </tr>
          {rows.map((r) => (
            <tr>
              <td class="time">{r.minute.toISOString().slice(11, 16)}</td>
              {r.values.map((v) => (
                <td class="num">{String(v)}</td>
              ))}
            </tr>
          ))}
        </table>
      )}
    </details>
  );
}
