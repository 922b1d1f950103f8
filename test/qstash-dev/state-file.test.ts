import { spawnSync } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Client } from "@upstash/qstash";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Journal } from "../../infra/qstash-dev/journal.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import type { MessageRecord } from "../../infra/qstash-dev/types.ts";
import { startReceiver } from "./receiver.ts";
import { run } from "./run.ts";

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "qstash-state-"));
  file = path.join(dir, "queue.jsonl");
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const clientFor = (dev: { url: string; token: string }) =>
  new Client({ baseUrl: dev.url, token: dev.token, devMode: false, enableTelemetry: false });

async function admin(dev: { url: string; token: string }, route: string): Promise<unknown> {
  const method = route === "messages" ? "GET" : "POST";
  const response = await fetch(`${dev.url}/__admin/${route}`, {
    method,
    headers: { Authorization: `Bearer ${dev.token}` },
  });
  expect(response.status).toBe(200);
  return response.json();
}

describe("a state file: the queue outlives the process (ADR 0029)", () => {
  it("a killed server loses nothing it answered: waiting jobs, a retry's count, a dead letter, deduplication", async () => {
    const receiver = await startReceiver();
    let failing = true;
    receiver.state.respond = (r) => {
      if (r.path === "/dead") return { status: 500 };
      if (r.path === "/retry" && failing) return { status: 503, headers: { "Retry-After": "2" } };
      return { status: 200 };
    };
    const env = { QSTASH_DEV_PORT: "0", QSTASH_TOKEN: "state-token", QSTASH_DEV_STATE_FILE: file };
    const first = run("infra/qstash-dev/main.ts", env);
    let second: ReturnType<typeof run> | undefined;
    try {
      const [, url] = await first.waitForOutput(/QSTASH_URL=(http:\/\/127\.0\.0\.1:\d+)/);
      expect(first.output()).toContain(
        `queue kept in ${file}: 0 messages waiting and 0 dead letters from before`,
      );
      const dev = { url: url!, token: "state-token" };
      const client = clientFor(dev);
      const retry = await client.publishJSON({
        url: receiver.url("/retry"),
        body: { n: "retry" },
        retries: 3,
      });
      const dead = await client.publishJSON({ url: receiver.url("/dead"), body: { n: "dead" }, retries: 0 });
      await receiver.waitForRequests(1, "/retry");
      await receiver.waitForRequests(1, "/dead");
      await expect
        .poll(async () => (await client.dlq.listMessages()).messages.map((m) => m.messageId))
        .toEqual([dead.messageId]);
      // Then everything else waits (delivery paused) and the process dies without a word.
      await admin(dev, "pause");
      const jobs = Array.from({ length: 300 }, (_, i) => ({
        url: receiver.url("/jobs"),
        body: { i },
        deduplicationId: `job-${i}`,
      }));
      const answers = await client.batchJSON(jobs);
      expect(answers).toHaveLength(300);
      first.child.kill("SIGKILL");
      await first.waitForExit();
      expect(receiver.received.filter((r) => r.path === "/jobs")).toHaveLength(0);
      failing = false;

      second = run("infra/qstash-dev/main.ts", env);
      const [, url2] = await second.waitForOutput(/QSTASH_URL=(http:\/\/127\.0\.0\.1:\d+)/);
      expect(second.output()).toContain(
        `queue kept in ${file}: 301 messages waiting and 1 dead letter from before`,
      );
      const dev2 = { url: url2!, token: "state-token" };
      const client2 = clientFor(dev2);
      // Every job it answered is delivered, each once (none had started).
      const delivered = await receiver.waitForRequests(300, "/jobs", 20_000);
      expect(new Set(delivered.map((r) => (JSON.parse(r.body) as { i: number }).i)).size).toBe(300);
      // The retry kept its count: its next attempt is the second.
      const retried = await receiver.waitForRequests(2, "/retry", 20_000);
      expect(retried[1]!.headers["upstash-message-id"]).toBe(retry.messageId);
      expect(retried[1]!.headers["upstash-retried"]).toBe("1");
      // The dead letter is still there, and a publish QStash saw is still deduplicated.
      expect((await client2.dlq.listMessages()).messages.map((m) => m.messageId)).toEqual([dead.messageId]);
      const again = await client2.publishJSON({
        url: receiver.url("/jobs"),
        body: { i: 7 },
        deduplicationId: "job-7",
      });
      expect(again.messageId).toBe(answers[7]!.messageId);
      expect(again.deduplicated).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(receiver.received.filter((r) => r.path === "/jobs")).toHaveLength(300);
    } finally {
      first.child.kill("SIGKILL");
      second?.child.kill("SIGKILL");
      await receiver.close();
    }
  }, 60_000);

  describe("in process", () => {
    const open: QStashDev[] = [];
    const start = async (options: Parameters<typeof startQStashDev>[0] = {}) => {
      const dev = await startQStashDev({ timeScale: 0.001, stateFile: file, ...options });
      open.push(dev);
      return dev;
    };
    afterEach(async () => {
      await Promise.all(open.splice(0).map((dev) => dev.close()));
    });

    it("delivers nothing twice: a message delivered before the restart is not restored", async () => {
      const receiver = await startReceiver();
      try {
        const dev = await start();
        const { messageId } = await clientFor(dev).publishJSON({ url: receiver.url("/once"), body: {} });
        await dev.waitForSettled(messageId);
        await dev.close();
        const again = await start();
        expect(again.restored).toEqual({ waiting: 0, deadLetters: 0 });
        await new Promise((resolve) => setTimeout(resolve, 200));
        expect(receiver.received).toHaveLength(1);
      } finally {
        await receiver.close();
      }
    });

    it("tries again a message whose attempt the stop cut short, and waits while started paused", async () => {
      const receiver = await startReceiver();
      let hold = true;
      receiver.state.respond = () => (hold ? new Promise(() => {}) : { status: 200 }); // the first attempt never answers
      try {
        const dev = await start();
        const { messageId } = await clientFor(dev).publishJSON({ url: receiver.url("/cut"), body: {} });
        await receiver.waitForRequests(1, "/cut");
        await dev.close(); // aborts the attempt in flight
        hold = false;
        const again = await start({ startPaused: true });
        expect(again.restored).toEqual({ waiting: 1, deadLetters: 0 });
        await new Promise((resolve) => setTimeout(resolve, 200));
        expect(receiver.received).toHaveLength(1);
        expect(again.message(messageId)?.state).toBe("CREATED");
        again.resumeDelivery();
        const settled = await again.waitForSettled(messageId);
        expect(settled.state).toBe("DELIVERED");
        expect(receiver.received).toHaveLength(2);
      } finally {
        await receiver.close();
      }
    });

    it("keeps a cancel, a dead letter's deletion and a reset", async () => {
      const receiver = await startReceiver();
      receiver.state.respond = () => ({ status: 500 });
      try {
        const dev = await start();
        const client = clientFor(dev);
        dev.pauseDelivery();
        const cancelled = await client.publishJSON({ url: receiver.url("/c"), body: {} });
        await client.messages.delete(cancelled.messageId);
        dev.resumeDelivery();
        const deadA = await client.publishJSON({ url: receiver.url("/a"), body: {}, retries: 0 });
        const deadB = await client.publishJSON({ url: receiver.url("/b"), body: {}, retries: 0 });
        await dev.waitForSettled(deadA.messageId);
        await dev.waitForSettled(deadB.messageId);
        const letters = (await client.dlq.listMessages()).messages;
        await client.dlq.delete(letters.find((m) => m.messageId === deadA.messageId)!.dlqId);
        await dev.close();

        const again = await start();
        expect(again.restored).toEqual({ waiting: 0, deadLetters: 1 });
        expect((await clientFor(again).dlq.listMessages()).messages.map((m) => m.messageId)).toEqual([
          deadB.messageId,
        ]);
        again.reset();
        await again.close();
        expect(readFileSync(file, "utf8")).toBe("");
        expect((await start()).restored).toEqual({ waiting: 0, deadLetters: 0 });
      } finally {
        await receiver.close();
      }
    });

    it("keeps every message across the file's compactions, the one that set it off too", async () => {
      const dev = await start();
      dev.pauseDelivery();
      const opened = statSync(file).ino;
      const client = clientFor(dev);
      // ~133 KB a line (the body as base64): 16 MB is passed at about the 120th.
      const body = "x".repeat(100_000);
      const ids: string[] = [];
      for (let i = 0; i < 200; i++) {
        ids.push((await client.publish({ url: "http://127.0.0.1:9/big", body })).messageId);
      }
      await dev.close();
      expect(statSync(file).ino).not.toBe(opened); // written afresh (a new file renamed over it)
      const again = await start({ startPaused: true });
      expect(again.restored).toEqual({ waiting: 200, deadLetters: 0 });
      expect(again.messages().map((m) => m.messageId)).toEqual(ids);
    });

    it("is one server's at a time, and a killed server's file is taken over", async () => {
      const first = await start();
      await expect(start()).rejects.toThrow(
        `${file} is in use by another QStash dev server (pid ${process.pid}); stop it, or give this one a file of its own`,
      );
      await first.close();
      await (await start()).close();
      // The lock of a server that is gone: a pid no process holds any more.
      writeFileSync(`${file}.lock`, `${spawnSync(process.execPath, ["-e", ""]).pid}\n`);
      const next = await start();
      expect(readFileSync(`${file}.lock`, "utf8")).toBe(`${process.pid}\n`);
      await next.close();
      expect(existsSync(`${file}.lock`)).toBe(false);
    });

    it("says which line it cannot read, and drops a last line cut short", async () => {
      const dev = await start();
      dev.pauseDelivery();
      await clientFor(dev).publishJSON({ url: "http://127.0.0.1:9/x", body: {} });
      await dev.close();
      appendFileSync(file, '{"m":{"messageId":"msg_cu'); // the write the process died in
      expect((await start()).restored).toEqual({ waiting: 1, deadLetters: 0 });
      await Promise.all(open.splice(0).map((d) => d.close()));

      writeFileSync(file, `${readFileSync(file, "utf8")}not json\n{"undlq":"x"}\n`);
      await expect(start()).rejects.toThrow(`${file}, line 2, is not a journal line`);
    });
  });

  it("writes itself afresh once it has grown, keeping only what is live", () => {
    const { journal } = Journal.open(file);
    // Its owner's only: it holds job bodies, tenants' data.
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const message = (i: number, state: MessageRecord["state"]): MessageRecord => ({
      messageId: `msg_${i}`,
      seq: i,
      version: 0,
      kind: "publish",
      url: "http://127.0.0.1:9/x",
      method: "POST",
      body: Buffer.alloc(2_000, "x"),
      header: {},
      maxRetries: 3,
      timeoutMs: 1_000,
      createdAt: 0,
      notBefore: 0,
      callerIP: "127.0.0.1",
      state,
      retried: 0,
      readyAt: 0,
      attempts: [],
    });
    const waiting = message(0, "CREATED");
    journal.putMessage(waiting);
    // ~3 KB a line: 16 MB is passed after ~6,000 deliveries.
    let compactions = 0;
    for (let i = 1; i <= 12_000; i++) {
      journal.putMessage(message(i, "CREATED"));
      journal.putMessage(message(i, "DELIVERED"));
      if (journal.wantsCompaction) {
        journal.compact({ messages: [waiting], dlq: [], dedup: [] });
        compactions++;
      }
    }
    journal.close();
    // A change after close fails (its descriptor number may be another file's by now).
    expect(() => journal.putMessage(waiting)).toThrow(`the queue file ${file} is closed`);
    expect(compactions).toBeGreaterThanOrEqual(2);
    expect(statSync(file).size).toBeLessThan(20 * 1024 * 1024);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const { journal: reopened, recovered } = Journal.open(file);
    reopened.close();
    expect(recovered.messages.map((m) => m.messageId)).toEqual(["msg_0"]);
    expect(statSync(file).size).toBeLessThan(10_000);
  });
});
