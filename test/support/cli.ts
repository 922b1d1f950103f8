import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";

const cli = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the operator CLI as a user would, in its own process, with only the given environment. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return runScript(cli, args, env);
}

/**
 * Runs a TypeScript entry point (the CLI, a benchmark) in its own Node process with
 * only PATH and `env`, from this folder: not the repo root, so a developer's .env
 * cannot leak into the test. Answers its exit code and what it printed.
 */
export function runScript(
  script: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], {
      env: { PATH: process.env.PATH ?? "", ...env },
      cwd: fileURLToPath(new URL(".", import.meta.url)),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Runs each bad command line (at once) and expects exit 2 with its message and the
 * usage, on stderr. Answers the results, in order, for anything more to check.
 */
export async function expectUsageErrors(cases: [string[], RegExp | string][]): Promise<CliResult[]> {
  const results = await Promise.all(cases.map(([args]) => runCli(args)));
  results.forEach((r, i) => {
    const [args, message] = cases[i]!;
    expect(r.code, args.join(" ")).toBe(2);
    expect(r.stderr, args.join(" ")).toMatch(message);
    expect(r.stderr, args.join(" ")).toMatch(/usage: npm run outbox/);
  });
  return results;
}

/** The first column (an id) of each row of a listing's text form: past its header, before its older-page hint. */
export function firstColumn(stdout: string): string[] {
  return stdout
    .trim()
    .split("\n")
    .slice(1)
    .filter((l) => !l.startsWith("older ones"))
    .map((l) => l.split(/\s+/)[0]!);
}
