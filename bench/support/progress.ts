/** Progress for people watching a long run; stdout stays for the table. */
const started = performance.now();

export function log(line: string): void {
  const s = ((performance.now() - started) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[bench ${s}s] ${line}\n`);
}

/**
 * Ctrl-C or SIGTERM mid-run: `stop` (the stack, the benchmark's database), then exit,
 * rather than leave a database behind on a shared server.
 * Known gap: importing wrangler (infra/workerd-stack.ts) registers its own SIGINT and
 * SIGTERM handlers, which call process.exit() at once and run before this one, so in
 * bench:write and bench:workerd the stop never runs and `edge_outbox_bench_<pid>` is
 * left behind (drop it by hand). Seen on 2026-12-04; not fixed yet.
 */
export function stopOnSignal(stop: () => Promise<void>): void {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      log(`${signal}: stopping the stack and dropping the database`);
      void stop().finally(() => process.exit(130));
    });
  }
}
