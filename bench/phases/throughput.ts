// Phases 1, 2, 3 and 8: the plain-SQL ceiling, the relay with the null publisher and
// the relay through @upstash/qstash to the dev server, each draining the same backlog
// in its own process (whose peak memory is phase 8). The three run interleaved in
// every repetition, so drift on a shared machine hits them alike.
import type { BenchContext } from "../support/context.ts";
import { resetOutbox, seedBacklog, settle, unfanned } from "../support/db.ts";
import { runRelayProcess, type RelayProcessInput, type RelayProcessOutput } from "../support/child.ts";
import { log } from "../support/progress.ts";
import { summarize, type Summary } from "../support/stats.ts";

export type Mode = RelayProcessInput["mode"];
export const MODES: Mode[] = ["ceiling", "null", "qstash"];

export interface ModeResult {
  eventsPerSecond: Summary;
  jobsPerSecond: Summary;
  peakRssMB: Summary;
  peakHeapMB: Summary;
  baselineRssMB: Summary;
  raw: RelayProcessOutput[];
}

export type ThroughputResult = Record<Mode, ModeResult>;

const MB = 1024 * 1024;

export async function throughput(ctx: BenchContext): Promise<ThroughputResult> {
  const raw: Record<Mode, RelayProcessOutput[]> = { ceiling: [], null: [], qstash: [] };
  for (let rep = 1; rep <= ctx.reps; rep++) {
    for (const mode of MODES) {
      await resetOutbox(ctx.db.admin);
      await seedBacklog(ctx.db.admin, ctx.sizes.backlog);
      await settle(ctx.db.admin);
      await ctx.qstash.reset();
      const out = await runRelayProcess({
        url: ctx.db.url,
        mode,
        batchSize: ctx.batchSize,
        ...(mode === "qstash" ? { qstash: { url: ctx.qstash.url, token: ctx.qstash.token } } : {}),
      });
      const left = await unfanned(ctx.db.admin);
      if (out.events !== ctx.sizes.backlog || left !== 0) {
        throw new Error(`${mode}: drained ${out.events} of ${ctx.sizes.backlog}, ${left} left`);
      }
      raw[mode].push(out);
      log(
        `throughput rep ${rep}/${ctx.reps} ${mode.padEnd(7)} ${Math.round(out.events / (out.ms / 1000))} events/s` +
          (out.jobs ? `, ${Math.round(out.jobs / (out.ms / 1000))} jobs/s` : "") +
          `, peak RSS ${(out.peakRssBytes / MB).toFixed(0)} MB`,
      );
    }
  }
  const result = {} as ThroughputResult;
  for (const mode of MODES) {
    const runs = raw[mode];
    result[mode] = {
      eventsPerSecond: summarize(runs.map((r) => r.events / (r.ms / 1000))),
      jobsPerSecond: summarize(runs.map((r) => r.jobs / (r.ms / 1000))),
      peakRssMB: summarize(runs.map((r) => r.peakRssBytes / MB)),
      peakHeapMB: summarize(runs.map((r) => r.peakHeapBytes / MB)),
      baselineRssMB: summarize(runs.map((r) => r.baselineRssBytes / MB)),
      raw: runs,
    };
  }
  return result;
}
