import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { watchWrangler, type WranglerWatch } from "../../infra/dev-watch.ts";
import { waitFor } from "../support/helpers.ts";

// Real processes stand in for `npx wrangler dev` and its workerd: node itself, run
// detached (its own process group, as dev.ts starts wrangler) or through a link
// named `workerd`, which is the name `ps` shows for it.
const bin = mkdtempSync(path.join(tmpdir(), "dev-watch-"));
const workerd = path.join(bin, "workerd");
symlinkSync(process.execPath, workerd);
afterAll(() => rmSync(bin, { recursive: true, force: true }));

// Starts two workerd, prints each one's pid on a line, and on SIGUSR2 "reloads":
// kills the last one and starts another 100 ms later, as miniflare does.
const FAKE_WRANGLER = `
const { spawn } = require("node:child_process");
const started = [];
const start = () => {
  const child = spawn(${JSON.stringify(workerd)}, ["-e", "setInterval(() => undefined, 1000)"], { stdio: "ignore" });
  started.push(child);
  process.stdout.write(child.pid + "\\n");
};
start();
start();
process.on("SIGUSR2", () => {
  started.pop().kill("SIGKILL");
  setTimeout(start, 100);
});
setInterval(() => undefined, 1000);
`;

const groups: number[] = [];
const watches: WranglerWatch[] = [];
afterEach(() => {
  watches.splice(0).forEach((w) => w.stop());
  for (const group of groups.splice(0)) {
    try {
      process.kill(-group, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
});

function detached(script: string): ChildProcess {
  const child = spawn(process.execPath, ["-e", script], {
    stdio: ["ignore", "pipe", "inherit"],
    detached: true,
  });
  groups.push(child.pid!);
  return child;
}
const living = () => detached("setInterval(() => undefined, 1000)");

/** A fake wrangler with its two workerd running, and their pids as they start. */
async function fakeWrangler(): Promise<{ wrangler: ChildProcess; workerds: number[] }> {
  const wrangler = detached(FAKE_WRANGLER);
  const workerds: number[] = [];
  wrangler.stdout!.on("data", (chunk: Buffer) =>
    workerds.push(...chunk.toString().trim().split("\n").map(Number)),
  );
  await waitFor(() => workerds.length === 2);
  return { wrangler, workerds };
}

function watch(wrangler: ChildProcess) {
  const deaths: string[] = [];
  const w = watchWrangler({ wrangler, onDeath: (why) => deaths.push(why), probeMs: 50, graceMs: 500 });
  watches.push(w);
  return { deaths, stop: () => w.stop() };
}

describe("watchWrangler", () => {
  it("says once that wrangler exited, with its exit code", async () => {
    const { deaths } = watch(detached("process.exit(3)"));
    await waitFor(() => deaths.length > 0);
    await sleep(200);
    expect(deaths).toEqual(["wrangler dev exited on its own (exit code 3)"]);
  });

  it("says the signal that killed wrangler, and an exit before the watch began", async () => {
    const wrangler = living();
    const { deaths } = watch(wrangler);
    wrangler.kill("SIGKILL");
    await waitFor(() => deaths.length > 0);
    expect(deaths).toEqual(["wrangler dev exited on its own (killed by SIGKILL)"]);

    const gone = detached("process.exit(0)");
    await new Promise((resolve) => gone.once("exit", resolve));
    expect(watch(gone).deaths).toEqual(["wrangler dev exited on its own (exit code 0)"]);
  });

  it("says which workerd died when wrangler, living on, starts none in its place", async () => {
    const { wrangler, workerds } = await fakeWrangler();
    const { deaths } = watch(wrangler);
    await sleep(300); // both seen
    process.kill(workerds[1]!, "SIGKILL");
    const killedAt = Date.now();
    await waitFor(() => deaths.length > 0, 5_000);
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(500);
    expect(deaths).toEqual([
      `workerd (pid ${workerds[1]}, wrangler dev's Worker runtime) exited and wrangler dev, still ` +
        "running, started none in its place within 0.5 s",
    ]);
    expect(wrangler.exitCode).toBeNull();
  });

  it("lets a reload replace a workerd, however often", async () => {
    const { wrangler, workerds } = await fakeWrangler();
    const { deaths } = watch(wrangler);
    await sleep(300);
    for (let reload = 1; reload <= 3; reload++) {
      wrangler.kill("SIGUSR2");
      await waitFor(() => workerds.length === 2 + reload);
      await sleep(300);
    }
    await sleep(700);
    expect(deaths).toEqual([]);
  });

  it("reports nothing once stopped, as when the stack stops wrangler itself", async () => {
    const { wrangler, workerds } = await fakeWrangler();
    const { deaths, stop } = watch(wrangler);
    await sleep(300);
    stop();
    process.kill(workerds[0]!, "SIGKILL");
    wrangler.kill("SIGTERM");
    await new Promise((resolve) => wrangler.once("exit", resolve));
    await sleep(800);
    expect(deaths).toEqual([]);
  });
});
