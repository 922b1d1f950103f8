import { spawn } from "node:child_process";

const root = new URL("../../", import.meta.url).pathname;

/** Runs a TypeScript entry point under tsx, the way `npm run qstash:dev` does. */
export function run(script: string, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ["--import", "tsx", script], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const waiters = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    output += chunk.toString();
    for (const w of [...waiters]) w();
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    /** The exit code; kills the child and rejects if it has not exited within `timeoutMs`. */
    waitForExit(timeoutMs = 15_000): Promise<number | null> {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          child.kill("SIGKILL");
          reject(new Error(`still running after ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
      });
      return Promise.race([exited, deadline]).finally(() => clearTimeout(timer));
    },
    output: () => output,
    /** Resolves with the first match of `pattern` in the output so far or to come. */
    waitForOutput(pattern: RegExp, timeoutMs = 15_000): Promise<RegExpMatchArray> {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = output.match(pattern);
          if (match) {
            clearTimeout(timer);
            waiters.delete(check);
            resolve(match);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no ${pattern} in output:\n${output}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
  };
}
