import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";

/**
 * What `npm run dev` started outside its own process, written down as it starts, so
 * the next start can stop what a killed stack left behind.
 *
 * Ctrl-C, SIGTERM and a closed terminal stop everything (infra/dev.ts). A stack whose
 * own process was killed outright (SIGKILL, the OOM killer, an editor ending its task)
 * stopped nothing: wrangler runs in a process group of its own (so that Ctrl-C reaches
 * only the stack) and Postgres is a server of its own, and both lived on holding their
 * ports. The next `npm run dev` then said "port 8787 is taken", naming no process,
 * from a terminal that no longer had the old one.
 */
export interface StackRecord {
  /** The `npm run dev` process (infra/dev.ts). */
  pid: number;
  /** The embedded server's data folder; its `postmaster.pid` names the server. */
  postgres?: { dataDir: string };
  /** wrangler's process group (npx → wrangler → workerd). */
  wrangler?: { pgid: number };
}

export function recordStack(file: string, record: StackRecord): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(record)}\n`);
}

/** The record in `file`, or undefined when there is none or it cannot be read. */
function readStack(file: string): StackRecord | undefined {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as StackRecord;
  } catch {
    return undefined;
  }
}

export function forgetStack(file: string): void {
  rmSync(file, { force: true });
}

export interface LeftoverOptions {
  log: (line: string) => void;
  /** Who left them, as the line names it. */
  who?: string;
  /** How long each part may take to stop after its polite signal before it is killed. */
  graceMs?: number;
}

/**
 * When `file` names a stack whose own process is gone, stops what it started that is
 * still running: wrangler's group (SIGTERM, then SIGKILL after `graceMs`) and the
 * embedded Postgres (SIGINT, its fast shutdown: it rolls back what was in flight and
 * checkpoints). Every process is matched by its command line as well as its id, so a
 * process that took a recorded id since is never signalled. A stack still running is
 * left alone (the port checks then say so). Returns the names of what it stopped.
 */
export async function stopLeftovers(file: string, options: LeftoverOptions): Promise<string[]> {
  if (!existsSync(file)) return [];
  const record = readStack(file);
  if (!record) {
    forgetStack(file);
    return [];
  }
  const who = options.who ?? "the last npm run dev";
  const processes = listProcesses();
  const commandOf = (pid: number) => processes.find((p) => p.pid === pid)?.command;
  if (commandOf(record.pid)?.includes("infra/dev.ts")) return [];

  const graceMs = options.graceMs ?? 10_000;
  const stopped: string[] = [];
  const pgid = record.wrangler?.pgid;
  const group =
    pgid === undefined
      ? []
      : processes.filter((p) => p.pgid === pgid && /\b(wrangler|workerd)\b/.test(p.command));
  const postmaster = record.postgres ? postmasterOf(record.postgres.dataDir, commandOf) : undefined;
  const names = [
    ...(group.length > 0 ? [`wrangler dev (process group ${pgid})`] : []),
    ...(postmaster !== undefined ? [`Postgres (pid ${postmaster})`] : []),
  ];
  if (names.length > 0) {
    options.log(
      `${who} (pid ${record.pid}) ended without stopping what it started: stopping ${names.join(" and ")}…`,
    );
  }
  if (group.length > 0) {
    const alive = () => listProcesses().some((p) => p.pgid === pgid);
    await signalUntilGone(
      () => signal(-pgid!, "SIGTERM"),
      alive,
      graceMs,
      () => signal(-pgid!, "SIGKILL"),
    );
    stopped.push("wrangler dev");
  }
  if (postmaster !== undefined) {
    const alive = () => listProcesses().some((p) => p.pid === postmaster);
    const gone = await signalUntilGone(() => signal(postmaster, "SIGINT"), alive, graceMs);
    if (!gone) {
      throw new Error(
        `Postgres (pid ${postmaster}) left by ${who} did not stop within ${graceMs / 1000} s of SIGINT; stop it, then start again`,
      );
    }
    stopped.push("Postgres");
  }
  forgetStack(file);
  return stopped;
}

/**
 * stopLeftovers for every other port's record in `dir` whose Postgres ran on
 * `dataDir`. Its server still holds that folder, so a stack started on another port
 * after the kill (PORT changed) could not start its own there, and the old port's
 * wrangler lived on: stopped here, naming the port. A stack still running is left
 * alone, as by stopLeftovers; Postgres then says the folder is in use.
 */
export async function stopLeftoversOnDataDir(
  dir: string,
  dataDir: string,
  ownFile: string,
  options: LeftoverOptions,
): Promise<string[]> {
  if (!existsSync(dir)) return [];
  const stopped: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const port = /^stack-(\d+)\.json$/.exec(name)?.[1];
    const file = path.join(dir, name);
    if (port === undefined || path.resolve(file) === path.resolve(ownFile)) continue;
    // An unreadable record is left for that port's own next start, which clears it.
    const record = readStack(file);
    if (record?.postgres === undefined || path.resolve(record.postgres.dataDir) !== path.resolve(dataDir))
      continue;
    stopped.push(...(await stopLeftovers(file, { ...options, who: `the npm run dev on port ${port}` })));
  }
  return stopped;
}

interface ProcessLine {
  pid: number;
  pgid: number;
  command: string;
}

/**
 * Every live process with its group and command line (`ps`, as on Linux and macOS).
 * A zombie is not live: an orphan that exited waits there until init reaps it, and
 * signalling it (process.kill(pid, 0)) still succeeds.
 */
function listProcesses(): ProcessLine[] {
  const out = execFileSync("ps", ["-axo", "pid=,pgid=,stat=,command="], { encoding: "utf8" });
  return out.split("\n").flatMap((line) => {
    const match = /^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line);
    if (!match || match[3]!.startsWith("Z")) return [];
    return [{ pid: Number(match[1]), pgid: Number(match[2]), command: match[4]! }];
  });
}

/** The server running on `dataDir`, by its `postmaster.pid`, if that process is a postgres of this folder. */
function postmasterOf(dataDir: string, commandOf: (pid: number) => string | undefined): number | undefined {
  const pidFile = path.join(dataDir, "postmaster.pid");
  if (!existsSync(pidFile)) return undefined;
  const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
  const command = Number.isInteger(pid) && pid > 0 ? commandOf(pid) : undefined;
  return command !== undefined && /\bpostgres\b/.test(command) && command.includes(dataDir) ? pid : undefined;
}

/** process.kill, where a process already gone is no error. */
function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Gone already.
  }
}

/** Sends `first`, then waits until `alive()` is false; after `graceMs`, `last` (if any) and a second wait. */
async function signalUntilGone(
  first: () => void,
  alive: () => boolean,
  graceMs: number,
  last?: () => void,
): Promise<boolean> {
  first();
  if (await waitUntil(() => !alive(), graceMs)) return true;
  if (!last) return false;
  last();
  return waitUntil(() => !alive(), 2_000);
}

async function waitUntil(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return true;
}
