/** Progress for people watching a long run; stdout stays for the table. */
const started = performance.now();

export function log(line: string): void {
  const s = ((performance.now() - started) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[bench ${s}s] ${line}\n`);
}

const STOP_SIGNALS = ["SIGINT", "SIGTERM"] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

/**
 * Ctrl-C or SIGTERM mid-run: `stop` (the stack, the benchmark's database), then exit
 * 130, rather than leave a database behind on a shared server.
 *
 * Listeners run in the order they were added, and wrangler adds its own for both
 * signals when imported (infra/workerd-stack.ts), then miniflare and signal-exit
 * more when a Worker starts; each calls process.exit() at once, so a listener added
 * after them never got to drop the database. So this one takes the signals over:
 * the other listeners, those already there and any added later, are moved aside and
 * run only after `stop` has finished (with process.exitCode already 130, so their
 * own process.exit() keeps it). Their exit-time cleanup (killing workerd, temporary
 * files) still runs. A second Ctrl-C while stopping (a second later or more), or a
 * `stop` that has not finished in `timeoutMs`, goes straight to them.
 *
 * Returns `stop` made to run at most once, for the run's own `finally`.
 */
export function stopOnSignal(stop: () => Promise<void>, timeoutMs = 30_000): () => Promise<void> {
  // The run's own `finally` stops too, usually while the signal's stop is under way:
  // one stop, awaited by both, rather than two racing to drop the same database.
  let stopped: Promise<void> | undefined;
  const once = () => (stopped ??= stop());
  const others: Record<StopSignal, Array<(...args: unknown[]) => void>> = { SIGINT: [], SIGTERM: [] };
  let stoppingSince: number | undefined;
  const handOver = (signal: StopSignal) => {
    process.exitCode = 130;
    for (const listener of others[signal].splice(0)) listener(signal);
    process.exit(130);
  };
  const ours = (signal: StopSignal) => {
    // tsx's parent process passes the terminal's signal on to this one, which had it
    // from the terminal too: a repeat within a second is the same Ctrl-C.
    if (stoppingSince !== undefined) {
      if (performance.now() - stoppingSince > 1_000) handOver(signal);
      return;
    }
    stoppingSince = performance.now();
    // The run itself fails meanwhile (its services got the signal too, its pools are
    // being closed): one line, not a stack trace, and no exit before `stop` is done.
    process.on("uncaughtException", (error) => log(`after ${signal}: ${error.message}`));
    log(`${signal}: stopping the stack and dropping the database`);
    const timedOut = new Promise<void>((resolve) => setTimeout(resolve, timeoutMs).unref());
    void Promise.race([
      once().catch((error: unknown) => log(`stopping failed: ${String(error)}`)),
      timedOut,
    ]).finally(() => handOver(signal));
  };
  const isStopSignal = (event: string | symbol): event is StopSignal =>
    (STOP_SIGNALS as readonly (string | symbol)[]).includes(event);
  const setAside = (signal: StopSignal) => {
    for (const listener of process.listeners(signal)) {
      if (listener === ours) continue;
      process.removeListener(signal, listener);
      others[signal].push(listener as (...args: unknown[]) => void);
    }
  };
  for (const signal of STOP_SIGNALS) {
    setAside(signal);
    process.on(signal, ours);
  }
  // 'newListener' fires before the listener is added, so set it aside just after.
  process.on("newListener", (event, listener) => {
    if (isStopSignal(event) && listener !== ours) queueMicrotask(() => setAside(event));
  });
  return once;
}
