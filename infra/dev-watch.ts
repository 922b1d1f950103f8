// `npm run dev`'s watch on `wrangler dev`: the stack is only worth running while
// its Worker is, so the first sign that the Worker is gone is said once and the
// stack stops. Two signs: wrangler exits, or a workerd it started (the runtime
// serving its port, or the one running the Worker) dies under a wrangler that
// lives on. Miniflare neither restarts such a workerd nor says so nor exits: the
// port then takes connections and answers none, or refuses them. workerd is not
// our child, so its exit status cannot be read here; its pid is named instead.
import { execFile, type ChildProcess } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";

export interface WranglerWatchOptions {
  /** The `npx wrangler dev` process, started detached: its pid is the group of all it starts. */
  wrangler: ChildProcess;
  /** Called at most once, with a line naming what died and how. */
  onDeath: (why: string) => void;
  /** How often wrangler's workerd processes are listed. */
  probeMs?: number;
  /**
   * How long a workerd may be gone before it counts as dead: a reload (wrangler
   * rebuilding on a saved file) kills the Worker's workerd and starts another,
   * which takes a moment.
   */
  graceMs?: number;
}

export interface WranglerWatch {
  /** Nothing is reported after this, e.g. while the stack stops wrangler itself. */
  stop(): void;
}

/**
 * Watches from wrangler's start: its exit at any time, and a workerd of its group
 * gone for `graceMs` with no new one started in its place.
 */
export function watchWrangler(options: WranglerWatchOptions): WranglerWatch {
  const { wrangler, onDeath } = options;
  const probeMs = options.probeMs ?? 2_000;
  const graceMs = options.graceMs ?? 10_000;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const running = new Set<number>();
  // Gone, oldest first, each until a new workerd takes its place.
  const gone: { pid: number; at: number }[] = [];

  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    wrangler.off("exit", onExit);
  };
  const die = (why: string) => {
    if (stopped) return;
    stop();
    onDeath(why);
  };
  function onExit(code: number | null, signal: NodeJS.Signals | null) {
    die(`wrangler dev exited on its own (${exitStatus(code, signal)})`);
  }
  const probe = async () => {
    const group = wrangler.pid;
    const now = group === undefined ? undefined : await workerdsIn(group).catch(() => undefined);
    if (stopped) return;
    // Without `ps` (or a pid) there is nothing to tell; wrangler's exit is still watched.
    if (now) {
      const at = Date.now();
      for (const pid of running) if (!now.has(pid)) gone.push({ pid, at });
      for (const pid of now) if (!running.has(pid)) gone.shift();
      running.clear();
      now.forEach((pid) => running.add(pid));
      const oldest = gone[0];
      if (oldest && at - oldest.at >= graceMs) {
        die(
          `workerd (pid ${oldest.pid}, wrangler dev's Worker runtime) exited and wrangler dev, still ` +
            `running, started none in its place within ${graceMs / 1000} s`,
        );
        return;
      }
    }
    timer = setTimeout(() => void probe(), probeMs);
  };

  wrangler.on("exit", onExit);
  if (wrangler.exitCode !== null || wrangler.signalCode !== null)
    onExit(wrangler.exitCode, wrangler.signalCode);
  else void probe();
  return { stop };
}

/** How a process ended, as a person reads it. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `killed by ${signal}` : `exit code ${code}`;
}

/** The workerd processes of a process group, by `ps` (Linux and macOS alike). */
async function workerdsIn(group: number): Promise<Set<number>> {
  const { stdout } = await promisify(execFile)("ps", ["-A", "-o", "pid=,pgid=,comm="]);
  const pids = new Set<number>();
  for (const line of stdout.split("\n")) {
    const [pid, pgid, ...command] = line.trim().split(/\s+/);
    if (Number(pgid) === group && path.basename(command.join(" ")) === "workerd") pids.add(Number(pid));
  }
  return pids;
}
