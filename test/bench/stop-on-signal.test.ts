import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const child = fileURLToPath(new URL("../support/stop-on-signal-child.ts", import.meta.url));

/** Starts the child, sends it SIGINT once it is ready, and collects what it printed and its exit. */
function interrupt(mode: "stop" | "hang"): Promise<{ lines: string[]; code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child, mode], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout === "ready\n") proc.kill("SIGINT");
    });
    proc.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    proc.on("error", reject);
    proc.on("exit", (code) => resolve({ lines: stdout.trim().split("\n"), code, stderr }));
  });
}

describe("bench stopOnSignal", () => {
  it("finishes stop() before wrangler's and other listeners exit, and exits 130", async () => {
    const { lines, code, stderr } = await interrupt("stop");
    // Without the take-over, wrangler's import-time listener exits first and "stopped" never prints.
    expect(lines).toEqual(["ready", "stopped", "early"]);
    expect(code).toBe(130);
    expect(stderr).toContain("SIGINT: stopping");
  }, 30_000);

  it("hands over to the other listeners when stop() does not finish in time", async () => {
    const { lines, code } = await interrupt("hang");
    expect(lines).toEqual(["ready", "early"]);
    expect(code).toBe(130);
  }, 30_000);
});
