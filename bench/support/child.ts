import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface RelayProcessInput {
  url: string;
  /**
   * `ceiling`: the plain-SQL claim+mark on `table`; `null` / `qstash`: the relay
   * with the null publisher or through @upstash/qstash.
   */
  mode: "ceiling" | "null" | "qstash";
  batchSize: number;
  qstash?: { url: string; token: string };
  /** The ceiling's table: `events` unless the bare ceiling's. */
  table?: string;
  /** The ceiling also adds its rows to the fanned-per-minute count, as the relay's mark does (migration 0010). */
  counter?: boolean;
  /** Absolute path of another checkout's src/outbox/index.ts: the "before" of a before/after in one run. */
  outbox?: string;
}

export interface RelayProcessOutput {
  /** Wall time of the drain, from the first claim to the empty one. */
  ms: number;
  events: number;
  jobs: number;
  passes: number;
  /** After start-up and connecting, before the first pass. */
  baselineRssBytes: number;
  /** Highest resident set size of the process (getrusage maxrss). */
  peakRssBytes: number;
  baselineHeapBytes: number;
  /** Highest V8 heapUsed seen, sampled every 50 ms. */
  peakHeapBytes: number;
  /** CPU time of the process during the drain (process.cpuUsage: user + system), in microseconds. */
  cpuMicros: number;
  /**
   * CPU time of the connection's Postgres backend during the drain (/proc, 10 ms
   * ticks), ms; 0 where the server is not on this machine.
   */
  backendCpuMs: number;
}

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));

/**
 * Node options for every child the bench starts (relay processes and stand-in
 * services): BENCH_CHILD_NODE_ARGS, split on spaces, e.g. "--cpu-prof
 * --cpu-prof-dir=/tmp/p" to profile a drain exactly as the bench runs it
 * (docs/performance.md).
 */
export function childNodeArgs(): string[] {
  return process.env.BENCH_CHILD_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
}

/** Runs a TypeScript entry point in a fresh Node process (through tsx) and returns its last stdout line as JSON. */
export function runChild<T>(entry: string, args: string[], onLine?: (line: string) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...childNodeArgs(), "--import", "tsx", here(entry), ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (onLine) {
        const lines = stdout.split("\n");
        stdout = lines.pop() ?? "";
        lines.forEach(onLine);
      }
    });
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("exit", (code) => {
      const last = stdout.trim().split("\n").pop() ?? "";
      if (code !== 0 || !last) return reject(new Error(`${entry} exited with ${code}: ${stderr.trim()}`));
      resolve(JSON.parse(last) as T);
    });
  });
}

/** One drain in its own process: see relay-process.ts. */
export function runRelayProcess(input: RelayProcessInput): Promise<RelayProcessOutput> {
  return runChild<RelayProcessOutput>("./relay-process.ts", [JSON.stringify(input)]);
}
