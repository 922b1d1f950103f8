// `npm run dev`'s stand-in for Cloudflare's cron trigger: `wrangler dev
// --test-scheduled` runs the sweep only when asked (GET /__scheduled), so the dev
// stack asks, on wrangler.toml's schedule. The Worker logs its own `sweep:` line;
// this says something only when a tick fails.

import { cronPeriodMinutes } from "../src/domain/sweep-runs.ts";

export interface DevCron {
  /** The expression sent as `?cron=`, as Cloudflare passes it to `scheduled`. */
  cron: string;
  seconds: number;
  /** False when wrangler.toml's schedule is not one this reads (then: every minute). */
  understood: boolean;
}

const EVERY_MINUTE: DevCron = { cron: "* * * * *", seconds: 60, understood: true };

/**
 * The period of wrangler.toml's `crons`, when it is a simple one (cronPeriodMinutes:
 * `* * * * *`, `*\/N * * * *` with N dividing 60, `M * * * *` hourly). Anything else
 * (several crons, hours, weekdays) is swept every minute, the finest a cron trigger runs.
 */
export function devCronFromWranglerToml(toml: string): DevCron {
  const list = /^\s*crons\s*=\s*\[([^\]]*)\]/m.exec(toml)?.[1];
  if (list === undefined) return { ...EVERY_MINUTE, understood: false };
  const crons = [...list.matchAll(/"([^"]*)"|'([^']*)'/g)].map((m) => (m[1] ?? m[2]!).trim());
  if (crons.length !== 1) return { cron: crons[0] ?? EVERY_MINUTE.cron, seconds: 60, understood: false };
  const cron = crons[0]!;
  // Read as the Worker's views read the cron they were swept by (sweep-runs.ts).
  const minutes = cronPeriodMinutes(cron);
  return minutes === undefined
    ? { cron, seconds: 60, understood: false }
    : { cron, seconds: minutes * 60, understood: true };
}

export interface DevSweepOptions {
  /** The Worker's origin, e.g. http://127.0.0.1:8787. */
  workerUrl: string;
  cron: string;
  periodMs: number;
  /** One line per failed tick. */
  onFailure: (line: string) => void;
  /** How long one sweep may take before the tick counts as failed. */
  timeoutMs?: number;
  /** How long stop() waits for a tick in flight to settle after aborting it. */
  stopWaitMs?: number;
  fetch?: typeof fetch;
}

export interface DevSweep {
  /** No request starts after this; one in flight is abandoned, and awaited for stopWaitMs at most. */
  stop(): Promise<void>;
}

/**
 * Requests `/__scheduled` every `periodMs`, the first one period from now. Ticks
 * never overlap: a sweep that takes longer than the period delays the next one.
 */
export function startDevSweep(options: DevSweepOptions): DevSweep {
  const fetchImpl = options.fetch ?? fetch;
  const timeoutMs = options.timeoutMs ?? 120_000;
  const url = `${options.workerUrl}/__scheduled?cron=${encodeURIComponent(options.cron).replace(/%20/g, "+")}`;
  const stopped = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let inFlight: Promise<void> | undefined;

  const sweepOnce = async () => {
    // One controller per tick, aborted by its own timer or by stop(), and held here
    // for the whole request. Not AbortSignal.any over AbortSignal.timeout: in Node 20
    // the combined signal holds its sources weakly, so once garbage collection ran the
    // timeout never fired, and a request the Worker did not answer held the sweep (no
    // tick after it) and the stack's stop (it awaits the tick) for good.
    const tickSignal = new AbortController();
    const onStop = () => tickSignal.abort(stopped.signal.reason);
    stopped.signal.addEventListener("abort", onStop, { once: true });
    const timer = setTimeout(
      () => tickSignal.abort(new DOMException(`no answer within ${timeoutMs} ms`, "TimeoutError")),
      timeoutMs,
    );
    try {
      const res = await fetchImpl(url, { signal: tickSignal.signal });
      await res.text().catch(() => "");
      if (!res.ok)
        options.onFailure(`cron sweep: /__scheduled answered ${res.status} (see the Worker's log)`);
    } catch (error) {
      if (stopped.signal.aborted) return;
      options.onFailure(`cron sweep: ${describe(error, timeoutMs)}`);
    } finally {
      clearTimeout(timer);
      stopped.signal.removeEventListener("abort", onStop);
    }
  };

  const tick = async () => {
    timer = undefined;
    if (stopped.signal.aborted) return;
    const started = Date.now();
    inFlight = sweepOnce();
    await inFlight;
    inFlight = undefined;
    if (!stopped.signal.aborted) {
      timer = setTimeout(() => void tick(), Math.max(0, started + options.periodMs - Date.now()));
    }
  };

  timer = setTimeout(() => void tick(), options.periodMs);
  return {
    async stop() {
      stopped.abort();
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      // The tick in flight was aborted just now and settles at once, or is waited for
      // a moment at most: in a full test run a stack's stop hung right here (a fetch
      // that missed its abort, cause not found), and wrangler, stopped after this,
      // outlived the stack. Abandoned, a tick says nothing (stopped is aborted).
      let waited: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        inFlight,
        new Promise<void>((resolve) => (waited = setTimeout(resolve, options.stopWaitMs ?? 2_000))),
      ]);
      clearTimeout(waited);
    },
  };
}

function describe(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && error.name === "TimeoutError") {
    return `no answer from /__scheduled within ${Math.round(timeoutMs / 1000)} s`;
  }
  const cause = error instanceof Error ? (error.cause as { code?: string } | undefined) : undefined;
  const why = cause?.code ?? (error instanceof Error ? error.message : String(error));
  return `/__scheduled could not be reached (${why})`;
}
