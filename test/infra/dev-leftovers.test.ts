import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { recordStack, stopLeftovers, stopLeftoversOnDataDir } from "../../infra/dev-leftovers.ts";

/**
 * Real processes standing in for what a killed `npm run dev` leaves behind, told apart
 * by their command lines as the real ones are: a wrangler process group with a workerd
 * in it, and a postgres with its data folder.
 */
const idle = "setInterval(() => {}, 1000)";
const started: ChildProcess[] = [];
function start(args: string[], options: { detached?: boolean } = {}): ChildProcess {
  const child = spawn(process.execPath, args, { stdio: "ignore", ...options });
  started.push(child);
  return child;
}
/** Running: not gone, and not a zombie (an orphan that exited, until init reaps it). */
const alive = (pid: number) => {
  try {
    return !execFileSync("ps", ["-o", "stat=", "-p", String(pid)], { encoding: "utf8" }).startsWith("Z");
  } catch {
    return false; // ps exits 1 for no such process
  }
};
const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once("exit", () => resolve()));

/** A detached `wrangler` whose own child, `workerd`, is in its group; resolves with the workerd's pid. */
async function fakeWrangler(): Promise<{ leader: ChildProcess; workerd: number }> {
  const script = `const c = require("node:child_process").spawn(process.execPath, ["-e", ${JSON.stringify(idle)}, "workerd"], { stdio: "ignore" }); console.log(c.pid); ${idle}`;
  const leader = spawn(process.execPath, ["-e", script, "wrangler"], {
    detached: true,
    stdio: ["ignore", "pipe", "ignore"],
  });
  started.push(leader);
  const workerd = await new Promise<number>((resolve) =>
    leader.stdout!.once("data", (chunk: Buffer) => resolve(Number(chunk.toString().trim()))),
  );
  return { leader, workerd };
}

/**
 * A `postgres -D dataDir` that answers SIGINT with `onSigint`; resolves once its handler
 * is in place (a SIGINT before that, under a loaded machine, killed it by default).
 */
async function fakePostgres(dataDir: string, onSigint = "process.exit(0)"): Promise<ChildProcess> {
  mkdirSync(dataDir, { recursive: true });
  const child = spawn(
    process.execPath,
    [
      "-e",
      `process.on("SIGINT", () => { ${onSigint} }); console.log("ready"); ${idle}`,
      "postgres",
      "-D",
      dataDir,
    ],
    { stdio: ["ignore", "pipe", "ignore"] },
  );
  started.push(child);
  await new Promise((resolve) => child.stdout!.once("data", resolve));
  writeFileSync(path.join(dataDir, "postmaster.pid"), `${child.pid}\n${dataDir}\n`);
  return child;
}

/** The pid of a process that has exited: the killed `npm run dev`. */
async function deadPid(): Promise<number> {
  const child = start(["-e", ""]);
  await exited(child);
  return child.pid!;
}

let dir: string;
let file: string;
let said: string[];
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dev-leftovers-"));
  file = path.join(dir, "stack-8787.json");
  said = [];
});
afterEach(() => {
  for (const child of started.splice(0)) {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    } catch {
      child.kill("SIGKILL");
    }
  }
  rmSync(dir, { recursive: true, force: true });
});
const log = (line: string) => said.push(line);

describe("stopLeftovers", () => {
  it("stops what a killed stack left running, wrangler's whole group and Postgres, and says so", async () => {
    const wrangler = await fakeWrangler();
    const dataDir = path.join(dir, "pg");
    const postgres = await fakePostgres(dataDir);
    const pid = await deadPid();
    recordStack(file, { pid, postgres: { dataDir }, wrangler: { pgid: wrangler.leader.pid! } });

    expect(await stopLeftovers(file, { log })).toEqual(["wrangler dev", "Postgres"]);
    expect(said).toEqual([
      `the last npm run dev (pid ${pid}) ended without stopping what it started: stopping wrangler dev (process group ${wrangler.leader.pid}) and Postgres (pid ${postgres.pid})…`,
    ]);
    await exited(wrangler.leader);
    await exited(postgres);
    expect(postgres.signalCode ?? postgres.exitCode).toBe(0); // SIGINT: its fast shutdown
    expect(alive(wrangler.workerd)).toBe(false);
    expect(existsSync(file)).toBe(false);
  });

  it("stops a workerd whose wrangler is already gone", async () => {
    const wrangler = await fakeWrangler();
    process.kill(wrangler.leader.pid!, "SIGKILL");
    await exited(wrangler.leader);
    expect(alive(wrangler.workerd)).toBe(true);
    recordStack(file, { pid: await deadPid(), wrangler: { pgid: wrangler.leader.pid! } });
    expect(await stopLeftovers(file, { log })).toEqual(["wrangler dev"]);
    expect(alive(wrangler.workerd)).toBe(false);
  });

  it("leaves a stack that is still running alone", async () => {
    const wrangler = await fakeWrangler();
    const stack = start(["-e", idle, "infra/dev.ts"]);
    recordStack(file, { pid: stack.pid!, wrangler: { pgid: wrangler.leader.pid! } });
    expect(await stopLeftovers(file, { log })).toEqual([]);
    expect(said).toEqual([]);
    expect(alive(wrangler.workerd)).toBe(true);
    expect(existsSync(file)).toBe(true);
  });

  it("never signals a process that took a recorded id since", async () => {
    const other = start(["-e", idle, "an-editor"], { detached: true });
    const dataDir = path.join(dir, "pg");
    mkdirSync(dataDir);
    const unrelated = start(["-e", idle, "postgres", "-D", "/somewhere/else"]);
    writeFileSync(path.join(dataDir, "postmaster.pid"), `${unrelated.pid}\n`);
    recordStack(file, { pid: await deadPid(), postgres: { dataDir }, wrangler: { pgid: other.pid! } });
    expect(await stopLeftovers(file, { log })).toEqual([]);
    expect(alive(other.pid!)).toBe(true);
    expect(alive(unrelated.pid!)).toBe(true);
    expect(existsSync(file)).toBe(false);
  });

  it("says so when a Postgres left behind will not stop, and keeps the record", async () => {
    const dataDir = path.join(dir, "pg");
    const postgres = await fakePostgres(dataDir, "/* busy */");
    recordStack(file, { pid: await deadPid(), postgres: { dataDir } });
    await expect(stopLeftovers(file, { log, graceMs: 500 })).rejects.toThrow(
      `Postgres (pid ${postgres.pid}) left by the last npm run dev did not stop within 0.5 s of SIGINT`,
    );
    expect(existsSync(file)).toBe(true);
  });

  it("takes no record, or one it cannot read, as nothing left", async () => {
    expect(await stopLeftovers(file, { log })).toEqual([]);
    writeFileSync(file, "{ not json");
    expect(await stopLeftovers(file, { log })).toEqual([]);
    expect(existsSync(file)).toBe(false);
  });
});

describe("stopLeftoversOnDataDir", () => {
  it("stops a stack killed on another port whose Postgres holds this data folder, naming the port", async () => {
    // Killed on 8787; started again with PORT=8788 on the same embedded data folder.
    const wrangler = await fakeWrangler();
    const dataDir = path.join(dir, "pg");
    const postgres = await fakePostgres(dataDir);
    const pid = await deadPid();
    recordStack(file, { pid, postgres: { dataDir }, wrangler: { pgid: wrangler.leader.pid! } });
    // Another port's dead stack on another folder, and this port's own record: not this call's.
    const elsewhere = await fakePostgres(path.join(dir, "other-pg"));
    const otherFile = path.join(dir, "stack-9000.json");
    recordStack(otherFile, { pid: await deadPid(), postgres: { dataDir: path.join(dir, "other-pg") } });
    const own = path.join(dir, "stack-8788.json");
    recordStack(own, { pid: await deadPid(), postgres: { dataDir } });

    expect(await stopLeftoversOnDataDir(dir, dataDir, own, { log })).toEqual(["wrangler dev", "Postgres"]);
    expect(said).toEqual([
      `the npm run dev on port 8787 (pid ${pid}) ended without stopping what it started: stopping wrangler dev (process group ${wrangler.leader.pid}) and Postgres (pid ${postgres.pid})…`,
    ]);
    await exited(postgres);
    await exited(wrangler.leader);
    expect(alive(wrangler.workerd)).toBe(false);
    expect(existsSync(file)).toBe(false);
    expect(alive(elsewhere.pid!)).toBe(true);
    expect(existsSync(otherFile)).toBe(true);
    expect(existsSync(own)).toBe(true);
  });

  it("leaves a stack on another port that is still running, and a folder with no records", async () => {
    const dataDir = path.join(dir, "pg");
    const postgres = await fakePostgres(dataDir);
    const stack = start(["-e", idle, "infra/dev.ts"]);
    recordStack(file, { pid: stack.pid!, postgres: { dataDir } });
    const own = path.join(dir, "stack-8788.json");
    expect(await stopLeftoversOnDataDir(dir, dataDir, own, { log })).toEqual([]);
    expect(alive(postgres.pid!)).toBe(true);
    expect(said).toEqual([]);
    expect(await stopLeftoversOnDataDir(path.join(dir, "none"), dataDir, own, { log })).toEqual([]);
  });
});
