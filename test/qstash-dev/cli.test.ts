import { spawn } from "node:child_process";
import { Client } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { startReceiver } from "./receiver.ts";

const root = new URL("../../", import.meta.url).pathname;

/** Runs a TypeScript entry point under tsx, the way `npm run qstash:dev` does. */
function run(script: string, env: Record<string, string> = {}) {
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

describe("npm run qstash:dev (infra/qstash-dev/main.ts)", () => {
  it("prints URL, token and keys from the environment, logs each delivery, stops on SIGTERM", async () => {
    const receiver = await startReceiver();
    const proc = run("infra/qstash-dev/main.ts", {
      QSTASH_DEV_PORT: "0",
      QSTASH_TOKEN: "cli-token",
      QSTASH_CURRENT_SIGNING_KEY: "sig_cli_current",
      QSTASH_NEXT_SIGNING_KEY: "",
    });
    try {
      const [, url] = await proc.waitForOutput(/QSTASH_URL=(http:\/\/127\.0\.0\.1:\d+)/);
      expect(proc.output()).toContain("QSTASH_TOKEN=cli-token");
      expect(proc.output()).toContain("QSTASH_CURRENT_SIGNING_KEY=sig_cli_current");
      expect(proc.output()).toMatch(/QSTASH_NEXT_SIGNING_KEY=sig_\S+/); // empty means generate
      const client = new Client({
        baseUrl: url!,
        token: "cli-token",
        devMode: false,
        enableTelemetry: false,
      });
      const { messageId } = await client.publishJSON({ url: receiver.url("/from-cli"), body: { ok: true } });
      await proc.waitForOutput(
        new RegExp(`deliver ${messageId} POST ${receiver.url("/from-cli")} .*status=200`),
      );
      proc.child.kill("SIGTERM");
      expect(await proc.waitForExit()).toBe(0);
    } finally {
      proc.child.kill("SIGKILL");
      await receiver.close();
    }
  });

  it("refuses a bad QSTASH_DEV_PORT instead of starting on a surprise port", async () => {
    const proc = run("infra/qstash-dev/main.ts", { QSTASH_DEV_PORT: "eighty" });
    expect(await proc.waitForExit()).toBe(1);
    expect(proc.output()).toMatch(/QSTASH_DEV_PORT must be a port number/);
  });
});

describe("close()", () => {
  it("leaves nothing running: no sockets, servers or timers", async () => {
    const proc = run("test/qstash-dev/fixtures/close-leaves-nothing.ts");
    expect(await proc.waitForExit()).toBe(0);
    expect(proc.output().trim().split("\n").at(-1)).toBe("[]");
  });
});
