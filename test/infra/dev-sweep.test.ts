import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from "vitest";
import {
  devCronFromWranglerToml,
  startDevSweep,
  type DevSweep,
  type DevSweepOptions,
} from "../../infra/dev-sweep.ts";
import { freePort } from "../../src/node/postgres.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** V8's collector, callable from a test (as `node --expose-gc` would give it). */
function collectGarbage(): () => void {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

const root = fileURLToPath(new URL("../..", import.meta.url));

describe("devCronFromWranglerToml", () => {
  it("reads this repository's wrangler.toml as every minute", () => {
    expect(devCronFromWranglerToml(readFileSync(`${root}/wrangler.toml`, "utf8"))).toEqual({
      cron: "* * * * *",
      seconds: 60,
      understood: true,
    });
  });

  it("reads */N minutes, and sweeps every minute for what it does not read", () => {
    const read = (toml: string) => devCronFromWranglerToml(toml);
    expect(read(`[triggers]\ncrons = ["*/5 * * * *"]`)).toEqual({
      cron: "*/5 * * * *",
      seconds: 300,
      understood: true,
    });
    expect(read(`crons = [ '*/15 * * * *' ]`).seconds).toBe(900);
    expect(read(`crons = ["*/7 * * * *"]`)).toMatchObject({ seconds: 60, understood: false });
    expect(read(`crons = ["0 3 * * *"]`)).toEqual({ cron: "0 3 * * *", seconds: 60, understood: false });
    expect(read(`crons = ["17 * * * *"]`)).toEqual({ cron: "17 * * * *", seconds: 3600, understood: true });
    expect(read(`crons = ["* * * * *", "0 3 * * *"]`)).toMatchObject({ seconds: 60, understood: false });
    expect(read(`# crons = ["*/5 * * * *"]\nname = "x"`)).toEqual({
      cron: "* * * * *",
      seconds: 60,
      understood: false,
    });
  });
});

describe("startDevSweep", () => {
  let server: Server | undefined;
  let sweep: DevSweep | undefined;
  afterEach(async () => {
    await sweep?.stop();
    sweep = undefined;
    server?.closeAllConnections();
    await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
    server = undefined;
  });

  /**
   * The sweep on the every-minute cron, every `periodMs` (20 unless given), kept for
   * afterEach to stop; answers its stop and the failure lines it says, as they come.
   */
  function sweepEvery(
    options: Omit<DevSweepOptions, "cron" | "periodMs" | "onFailure"> & { periodMs?: number },
  ): { lines: string[]; stop: () => Promise<void> } {
    const lines: string[] = [];
    const started = startDevSweep({
      cron: "* * * * *",
      periodMs: 20,
      onFailure: (l) => lines.push(l),
      ...options,
    });
    sweep = started;
    return { lines, stop: () => started.stop() };
  }

  /** A stand-in Worker: records each request, answers as `answer` says. */
  async function worker(answer: (n: number, res: ServerResponse) => void) {
    const urls: string[] = [];
    server = createServer((req: IncomingMessage, res) => {
      urls.push(req.url!);
      answer(urls.length, res);
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, urls };
  }

  it("asks /__scheduled with the cron every period, saying nothing while it succeeds and one line per failed tick", async () => {
    const w = await worker((n, res) => {
      res.statusCode = n <= 2 ? 200 : 500;
      res.end(n <= 2 ? "Ran scheduled event" : "Error: sweep failed");
    });
    const { lines, stop } = sweepEvery({ workerUrl: w.url, periodMs: 40 });
    await waitFor(() => w.urls.length >= 2);
    expect(lines).toEqual([]);
    await waitFor(() => lines.length >= 2);
    await stop();
    expect(new Set(w.urls)).toEqual(new Set(["/__scheduled?cron=*+*+*+*+*"]));
    // One line per answered failure (a tick in flight at the stop is not one).
    expect(new Set(lines)).toEqual(new Set(["cron sweep: /__scheduled answered 500 (see the Worker's log)"]));
    expect(lines.length).toBeLessThanOrEqual(w.urls.length - 2);
    expect(lines.length).toBeGreaterThanOrEqual(w.urls.length - 3);
  });

  it("waits a whole period before the first tick, and stopped meanwhile leaves no timer", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const asked: string[] = [];
      const fetchStub = (async (url: string) => {
        asked.push(url);
        return new Response("Ran scheduled event");
      }) as typeof fetch;
      sweep = startDevSweep({
        workerUrl: "http://worker.test",
        cron: "*/5 * * * *",
        periodMs: 300_000,
        onFailure: () => {},
        fetch: fetchStub,
      });
      expect(vi.getTimerCount()).toBe(1);
      await vi.advanceTimersByTimeAsync(299_999);
      expect(asked).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(asked).toEqual(["http://worker.test/__scheduled?cron=*%2F5+*+*+*+*"]);
      // The next tick is pending; stopping clears it.
      expect(vi.getTimerCount()).toBe(1);
      await sweep.stop();
      expect(vi.getTimerCount()).toBe(0);
      await vi.advanceTimersByTimeAsync(900_000);
      expect(asked.length).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it("says in one line when the Worker cannot be reached", async () => {
    const w = await worker((_, res) => res.end());
    await new Promise((resolve) => server!.close(resolve));
    server = undefined;
    const { lines } = sweepEvery({ workerUrl: w.url });
    await waitFor(() => lines.length >= 1);
    expect(lines[0]).toBe("cron sweep: /__scheduled could not be reached (ECONNREFUSED)");
  });

  it("times out a tick the Worker never answers, garbage collection or not, and ticks again", async () => {
    // Never answers: the Worker lost the request (wrangler dev has done so under load).
    const w = await worker(() => {});
    const { lines } = sweepEvery({ workerUrl: w.url, timeoutMs: 1_000 });
    // AbortSignal.any over AbortSignal.timeout lost the timeout once the collector ran.
    const gc = collectGarbage();
    const collecting = setInterval(gc, 50);
    try {
      await waitFor(() => lines.length >= 2, 8_000);
    } finally {
      clearInterval(collecting);
    }
    expect(lines.slice(0, 2)).toEqual([
      "cron sweep: no answer from /__scheduled within 1 s",
      "cron sweep: no answer from /__scheduled within 1 s",
    ]);
    expect(w.urls.length).toBeGreaterThanOrEqual(2);
  });

  it("stops within its bound even when the sweep in flight never settles, abort or not", async () => {
    let asked = 0;
    // A fetch that ignores its signal: what stop() must not wait on for good.
    const deaf = (() => {
      asked++;
      return new Promise<Response>(() => undefined);
    }) as typeof fetch;
    const { lines, stop } = sweepEvery({
      workerUrl: "http://worker.test",
      periodMs: 10,
      stopWaitMs: 300,
      fetch: deaf,
    });
    await waitFor(() => asked === 1);
    const started = Date.now();
    await stop();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(Date.now() - started).toBeLessThan(2_000);
    await sleep(50);
    expect(asked).toBe(1);
    expect(lines).toEqual([]);
  });

  it("stops with a sweep in flight: that one abandoned and unreported, none after it", async () => {
    // Never answers: the tick is still in flight when the stack stops.
    const w = await worker(() => {});
    const { lines, stop } = sweepEvery({ workerUrl: w.url });
    await waitFor(() => w.urls.length === 1);
    await stop();
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(w.urls.length).toBe(1);
    expect(lines).toEqual([]);
  });
});

describe("npm run dev", () => {
  const t = useTestDatabase();
  // The stacks' QStash queues (ADR 0029), kept out of .dev.
  const queues = mkdtempSync(path.join(tmpdir(), "dev-queues-"));
  afterAll(() => rmSync(queues, { recursive: true, force: true }));

  /**
   * `npm run dev` on this test's database (no embedded Postgres, nothing under .dev
   * but the secrets any run reads or makes) and `port` (a free one by default), with
   * `env` added; its QStash queue file is `<port>.jsonl` in a temporary folder. Its
   * output is stamped with the seconds since the start, so a failure says which step
   * was slow. `restore()` puts back the .dev.vars it writes as it was found.
   */
  async function startStack(env: Record<string, string>, port?: number) {
    port ??= await freePort();
    const devVarsFile = `${root}/.dev.vars`;
    const devVarsBefore = existsSync(devVarsFile) ? readFileSync(devVarsFile) : undefined;
    const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: t.url,
        PORT: String(port),
        MAIL_SINK_PORT: "0",
        QSTASH_DEV_PORT: "0",
        QSTASH_DEV_STATE_FILE: path.join(queues, `${port}.jsonl`),
        ...env,
      },
    });
    const stack = { child, port, output: "", errors: "" };
    const started = Date.now();
    const stamped = (chunk: Buffer) =>
      chunk.toString().replace(/^(?=.)/gm, () => `+${((Date.now() - started) / 1000).toFixed(1)}s `);
    child.stdout.on("data", (chunk: Buffer) => (stack.output += stamped(chunk)));
    child.stderr.on("data", (chunk: Buffer) => {
      stack.errors += chunk.toString();
      stack.output += stamped(chunk);
    });
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.on("exit", (code, signal) => resolve([code, signal])),
    );
    return {
      ...stack,
      get output() {
        return stack.output;
      },
      get errors() {
        return stack.errors;
      },
      exited,
      running: () => waitFor(() => stack.output.includes("is running") || child.exitCode !== null, 150_000),
      /** Ctrl-C, then its exit, within the stop's own bounds (30 s) or a failure with its output. */
      async stop() {
        child.kill("SIGINT");
        const stopped = await Promise.race([exited.then(() => true), sleep(30_000).then(() => false)]);
        if (stopped) return exited;
        child.kill("SIGKILL");
        throw this.withOutput(new Error("npm run dev did not stop within 30 s of SIGINT"));
      },
      /**
       * `body` once the stack runs; a failure carries its output, and the stack is
       * stopped and .dev.vars put back whatever happens.
       */
      async whileRunning(body: () => Promise<void>) {
        try {
          await this.running();
          await body();
        } catch (error) {
          throw this.withOutput(error);
        } finally {
          await this.stop().finally(() => this.restore());
        }
      },
      withOutput: (error: unknown) =>
        Object.assign(error as Error, {
          message: `${(error as Error).message}\n--- npm run dev said:\n${stack.output.slice(-6_000)}`,
        }),
      restore() {
        if (devVarsBefore === undefined) rmSync(devVarsFile, { force: true });
        else writeFileSync(devVarsFile, devVarsBefore);
      },
    };
  }

  it("runs the cron sweep on its own every DEV_SWEEP_SECONDS, with QSTASH_DEV_TIME_SCALE, and stops cleanly", async () => {
    const stack = await startStack({ DEV_SWEEP_SECONDS: "1", QSTASH_DEV_TIME_SCALE: "0.01" });
    try {
      await stack.running();
      expect(stack.output).toContain("(time scale 0.01: delays and retry backoff ×0.01)");
      // It said "up to date" however many it applied: a start after an upgrade said nothing of it.
      expect(stack.output).toMatch(
        /\[dev\] migrations: nothing to apply: all \d+ migrations were applied already\n/,
      );
      expect(stack.output).toContain("[dev] cron sweep: every 1 s (DEV_SWEEP_SECONDS)");
      // Nobody curls /__scheduled here: the Worker's own sweep line comes from the stack's timer.
      await waitFor(
        () => (stack.output.match(/\bsweep: fanned \d+ of \d+ claimed/g) ?? []).length >= 2,
        30_000,
      );
      expect(stack.output).not.toContain("[dev] cron sweep: /__scheduled");
    } catch (error) {
      throw stack.withOutput(error);
    } finally {
      stack.child.kill("SIGINT");
      // A stack that does not stop within the stop's own bounds fails here, with its output.
      const stopped = await Promise.race([stack.exited.then(() => true), sleep(30_000).then(() => false)]);
      stack.restore();
      if (!stopped) {
        stack.child.kill("SIGKILL");
        // eslint-disable-next-line no-unsafe-finally -- the stack outliving its stop is the failure to report
        throw stack.withOutput(new Error("npm run dev did not stop within 30 s of SIGINT"));
      }
    }
    expect(await stack.exited).toEqual([0, null]);
    expect(stack.output).toContain("[dev] stopped");
    expect(stack.output).not.toMatch(/\[dev\] stopping cron sweep/);
  }, 200_000);

  // In this file, not beside the other npm run dev tests: two stacks in one checkout
  // at once would share .dev.vars, which each writes for its own wrangler.
  it("stops everything it started when whoever read its output went first (Ctrl-C on `| tee`)", async () => {
    const stack = await startStack({ DEV_SWEEP_SECONDS: "0" });
    try {
      await stack.running();
      expect(stack.output).toContain("is running");
      // tee got the Ctrl-C too and is gone: the stack's next line fails with EPIPE.
      stack.child.stdout.destroy();
      stack.child.kill("SIGINT");
      expect(await stack.exited).toEqual([0, null]);
      expect(stack.errors).not.toContain("EPIPE");
      // Nothing it started outlived it: wrangler (its own process group) let go of the port.
      await expect(fetch(`http://127.0.0.1:${stack.port}/healthz`)).rejects.toThrow();
    } catch (error) {
      throw stack.withOutput(error);
    } finally {
      stack.child.kill("SIGKILL");
      stack.restore();
    }
  }, 200_000);

  it("delivers after the next start the jobs still queued when it stopped (ADR 0029)", async () => {
    const first = await startStack({ DEV_SWEEP_SECONDS: "0" });
    const word = `restarted${Date.now()}`;
    try {
      await first.running();
      expect(first.output).toContain(": 0 messages waiting and 0 dead letters from before");
      const qstashUrl = /QStash \(dev\)\s+(http:\/\/\S+)/.exec(first.output)![1]!;
      const qstashToken = /QSTASH_TOKEN='([^']+)'/.exec(first.output)![1]!;
      const apiKey = /export EO_KEY='([^']+)'/.exec(first.output)![1]!;
      // QStash holds the note's jobs, as it would behind flow control or a retry's wait.
      const paused = await fetch(`${qstashUrl}/__admin/pause`, {
        method: "POST",
        headers: { Authorization: `Bearer ${qstashToken}` },
      });
      expect(paused.status).toBe(200);
      const created = await fetch(`http://127.0.0.1:${first.port}/notes`, {
        method: "POST",
        headers: { Authorization: `Bearer ${apiKey}`, "content-type": "application/json", Prefer: "wait=5" },
        body: JSON.stringify({ title: word, body: "queued when the stack stopped" }),
      });
      expect(created.status).toBe(201);
      const receipt = (await created.json()) as { events: { fannedOutAt: string | null }[] };
      expect(receipt.events.map((e) => e.fannedOutAt !== null)).toEqual([true]);
      expect(await first.stop()).toEqual([0, null]);
    } catch (error) {
      first.child.kill("SIGKILL");
      throw first.withOutput(error);
    } finally {
      first.restore();
    }

    const second = await startStack({ DEV_SWEEP_SECONDS: "0" }, first.port);
    await second.whileRunning(async () => {
      expect(second.output).toMatch(/: [1-9]\d* messages? waiting and 0 dead letters from before/);
      const apiKey = /export EO_KEY='([^']+)'/.exec(second.output)![1]!;
      // Nothing publishes the note's jobs again: only the restored queue can index it.
      await waitFor(async () => {
        const found = await fetch(`http://127.0.0.1:${second.port}/notes/search?q=${word}`, {
          headers: { Authorization: `Bearer ${apiKey}` },
        });
        return ((await found.json()) as { hits: unknown[] }).hits.length === 1;
      }, 30_000);
    });
  }, 300_000);

  it("stops at its next start what a killed stack left running, and comes up (infra/dev-leftovers.ts)", async () => {
    const first = await startStack({ DEV_SWEEP_SECONDS: "0" });
    // Whatever the outcome, the killed stack's wrangler does not outlive the test.
    let orphans: number | undefined;
    onTestFinished(() => {
      try {
        if (orphans !== undefined) process.kill(-orphans, "SIGKILL");
      } catch {
        // Stopped by the second start, as it should be.
      }
      rmSync(path.join(root, ".dev", `stack-${first.port}.json`), { force: true });
    });
    try {
      await first.running();
      const record = readFileSync(path.join(root, ".dev", `stack-${first.port}.json`), "utf8");
      orphans = (JSON.parse(record) as { wrangler: { pgid: number } }).wrangler.pgid;
      first.child.kill("SIGKILL"); // the OOM killer, an editor ending its task
      await first.exited;
      // wrangler, in its own process group, lives on holding the port; its database
      // path (the ws proxy) died with the stack's process.
      expect((await fetch(`http://127.0.0.1:${first.port}/healthz`)).status).toBe(503);
    } catch (error) {
      throw first.withOutput(error);
    } finally {
      first.restore();
    }

    const second = await startStack({ DEV_SWEEP_SECONDS: "0" }, first.port);
    await second.whileRunning(async () => {
      expect(second.output).toMatch(
        new RegExp(
          `\\[dev\\] the last npm run dev \\(pid ${first.child.pid}\\) ended without stopping what it started: stopping wrangler dev \\(process group \\d+\\)…`,
        ),
      );
      expect(second.output).toContain("is running");
      expect(second.output).not.toContain("is taken");
    });
    await expect(fetch(`http://127.0.0.1:${second.port}/healthz`)).rejects.toThrow();
    expect(existsSync(path.join(root, ".dev", `stack-${second.port}.json`))).toBe(false);
  }, 300_000);
});
