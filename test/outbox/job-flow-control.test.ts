import http from "node:http";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { createQStashPublisher, RELAY_POLICY, type Job } from "../../src/outbox/index.ts";

// A backlog released at once (after an outage) must not become as many concurrent
// Worker invocations, each opening database connections: the relay's jobs share
// one QStash flow-control key with a bounded parallelism.
let qstash: QStashDev;
let server: http.Server;
let base = "";
let running = 0;
let peak = 0;
let handled = 0;

beforeAll(async () => {
  qstash = await startQStashDev({ timeScale: 0.001 });
  server = http.createServer((req, res) => {
    running++;
    peak = Math.max(peak, running);
    req.resume();
    // Each job takes a while, as a handler doing database work does.
    setTimeout(() => {
      running--;
      handled++;
      res.end("ok");
    }, 100);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("no address");
  base = `http://127.0.0.1:${address.port}`;
});
afterAll(async () => {
  await qstash?.close();
  await new Promise((resolve) => server?.close(resolve));
});

function jobs(n: number): Job[] {
  return Array.from({ length: n }, (_, i) => {
    const id = randomUUID();
    return {
      subscription: "corpus.index",
      deduplicationId: `${id}:corpus.index`,
      body: {
        subscription: "corpus.index",
        event: {
          id,
          seq: i + 1,
          type: "corpus.note.created",
          subject: id,
          scope: null,
          payload: {},
          createdAt: "",
        },
        coalesced: [],
      },
    };
  });
}

describe("job flow control", () => {
  it("QStash runs at most the policy's parallelism of jobs at once, whichever publisher sent them", async () => {
    const { parallelism } = RELAY_POLICY.jobFlowControl;
    const options = { baseUrl: qstash.url, token: qstash.token, publicUrl: base };
    // Two publishers (a Worker kick and a CLI drain) with the same policy share the bound.
    const a = createQStashPublisher({ ...options, flowControl: RELAY_POLICY.jobFlowControl });
    const b = createQStashPublisher({ ...options, flowControl: RELAY_POLICY.jobFlowControl });
    const signal = new AbortController().signal;
    await Promise.all([a.publish(jobs(parallelism * 2), signal), b.publish(jobs(parallelism * 2), signal)]);
    await qstash.waitFor((messages) => messages.every((m) => m.state === "DELIVERED"), 20_000);
    expect(handled).toBe(parallelism * 4);
    expect(peak).toBe(parallelism);
  });
});
