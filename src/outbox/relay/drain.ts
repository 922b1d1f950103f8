import { openPasses, type PassResult, type RelayOptions } from "./pass.ts";

export interface DrainOptions extends RelayOptions {
  /** Stop starting passes after this long. */
  budgetMs: number;
  /**
   * `empty`: run until a pass claims nothing (sweeps, CLI). `not-full`: stop after
   * the first pass whose claim was not full (a kick after one write).
   */
  until?: "empty" | "not-full";
  maxPasses?: number;
  onPass?: (pass: PassResult, totals: DrainResult) => void;
}

export interface DrainResult {
  passes: number;
  claimed: number;
  fanned: number;
  failed: number;
  poisoned: number;
  jobs: number;
  stoppedBecause: "drained" | "budget" | "backoff" | "max-passes";
  backedOffUntil: Date | null;
  /**
   * Stopped by backoff: the failure of the pass that backed the relay off, or none
   * when the relay was backed off already and no pass ran. A sweep's line said
   * "0 failed, stopped: backoff" of 36 rows claimed and put back, with no reason.
   */
  error?: string;
}

/**
 * Passes one after another until there is nothing to claim, the relay is backed off, or time is up.
 * All on one connection: a pass that commits while the drain goes on carries the
 * next pass's claim with its COMMIT (ADR 0022), so n passes cost n + 1 round trips.
 */
export async function drain(options: DrainOptions): Promise<DrainResult> {
  const started = Date.now();
  const totals: DrainResult = {
    passes: 0,
    claimed: 0,
    fanned: 0,
    failed: 0,
    poisoned: 0,
    jobs: 0,
    stoppedBecause: "drained",
    backedOffUntil: null,
  };
  // Why the drain stops after a pass that claimed rows, or null to go on: asked
  // twice per pass, just before it commits (to send the next claim with the commit,
  // `passes` counting the pass in hand) and after it, with the same rules.
  const stopAfter = (full: boolean, passes: number): DrainResult["stoppedBecause"] | null => {
    if (options.until === "not-full" && !full) return "drained";
    if (Date.now() - started >= options.budgetMs) return "budget";
    if (options.maxPasses !== undefined && passes >= options.maxPasses) return "max-passes";
    return null;
  };
  const another = (full: boolean) => stopAfter(full, totals.passes + 1) === null;
  const session = await openPasses(options);
  try {
    for (;;) {
      const pass = await session.run(another);
      totals.passes++;
      totals.claimed += pass.claimed;
      totals.fanned += pass.fanned;
      totals.failed += pass.failed;
      totals.poisoned += pass.poisoned.length;
      totals.jobs += pass.jobs;
      options.onPass?.(pass, totals);
      if (pass.backedOffUntil) {
        totals.backedOffUntil = pass.backedOffUntil;
        return {
          ...totals,
          stoppedBecause: "backoff",
          ...(pass.error === undefined ? {} : { error: pass.error }),
        };
      }
      // The next pass started with this one's commit: it runs even if the budget ran
      // out while the commit travelled, rather than claim rows only to put them back.
      if (session.claimed) continue;
      if (pass.claimed === 0) return totals;
      const stoppedBecause = stopAfter(pass.full, totals.passes);
      if (stoppedBecause) return { ...totals, stoppedBecause };
    }
  } finally {
    await session.close();
  }
}
