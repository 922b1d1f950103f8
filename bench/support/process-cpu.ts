/**
 * CPU time of this process's descendants by program, read from /proc (Linux), so
 * a benchmark can say where a request's CPU went: workerd, Postgres or this Node
 * process (which runs the ws proxy, the QStash dev server and the load itself).
 */
import { readFileSync, readdirSync } from "node:fs";

interface ProcStat {
  pid: number;
  ppid: number;
  comm: string;
  /** utime + stime, in clock ticks. */
  own: number;
  /** cutime + cstime: children that exited and were waited for (Postgres backends). */
  children: number;
}

/** Linux's USER_HZ is 100 on every architecture Node supports: one tick is 10 ms. */
const MS_PER_TICK = 10;

function readStat(pid: string): ProcStat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const close = text.lastIndexOf(")");
    // After "pid (comm) ": field 3 (state) is index 0, so field n is index n - 3.
    const f = text.slice(close + 2).split(" ");
    return {
      pid: Number(pid),
      ppid: Number(f[1]),
      comm: text.slice(text.indexOf("(") + 1, close),
      own: Number(f[11]) + Number(f[12]),
      children: Number(f[13]) + Number(f[14]),
    };
  } catch {
    return undefined; // exited meanwhile
  }
}

export interface CpuSample {
  /** workerd processes (wrangler runs more than one) together. */
  workerdMs: number;
  /** The postmaster and every backend, including those that exited. */
  postgresMs: number;
  /** This Node process. */
  nodeMs: number;
}

/**
 * CPU used so far. Only processes under this one count: on a shared machine other
 * sessions run their own workerd and Postgres. Postgres counts only when it is a
 * child of this process (the embedded server), not a DATABASE_URL server.
 */
export function cpuSample(): CpuSample {
  const stats = readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .map(readStat)
    .filter((s): s is ProcStat => s !== undefined);
  const byParent = new Map<number, ProcStat[]>();
  for (const s of stats) byParent.set(s.ppid, [...(byParent.get(s.ppid) ?? []), s]);
  let workerd = 0;
  let postgres = 0;
  const walk = (pid: number, inPostgres: boolean) => {
    for (const child of byParent.get(pid) ?? []) {
      if (child.comm === "workerd") workerd += child.own;
      // The postmaster's comm is "postgres"; its backends are its children.
      const isPostmaster = !inPostgres && child.comm === "postgres";
      if (isPostmaster) postgres += child.own + child.children;
      else if (inPostgres) postgres += child.own;
      walk(child.pid, inPostgres || isPostmaster);
    }
  };
  walk(process.pid, false);
  const usage = process.cpuUsage();
  return {
    workerdMs: workerd * MS_PER_TICK,
    postgresMs: postgres * MS_PER_TICK,
    nodeMs: (usage.user + usage.system) / 1000,
  };
}

/** What was used between two samples, per request. */
export function cpuPer(before: CpuSample, after: CpuSample, requests: number): CpuSample {
  return {
    workerdMs: (after.workerdMs - before.workerdMs) / requests,
    postgresMs: (after.postgresMs - before.postgresMs) / requests,
    nodeMs: (after.nodeMs - before.nodeMs) / requests,
  };
}

/**
 * CPU time (user + system) one process has used so far, in ms, or undefined when
 * /proc does not show it (not Linux, another machine's Postgres, exited).
 */
export function processCpuMs(pid: number): number | undefined {
  const stat = readStat(String(pid));
  return stat === undefined ? undefined : stat.own * MS_PER_TICK;
}

/** This process's CPU time (user + system) since `start` (a `process.cpuUsage()`), in ms. */
export function cpuMsSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}
