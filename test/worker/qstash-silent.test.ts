import { createServer, type Server, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createQStashCanaryQueue } from "../../src/domain/canary.ts";
import type { Db } from "../../src/domain/db.ts";
import { collectDeadLetters, createQStashDeadLetters } from "../../src/domain/job-failures/dead-letters.ts";
import { PublishError } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";

// A QStash that takes the connection and never answers (a walkthrough's black hole
// held the cron sweep for minutes before its canary step). The sweep's SDK requests
// stop waiting after their timeout instead, and say so.
const t = useTestDatabase();
let server: Server;
let baseUrl: string;
const sockets = new Set<Socket>();

beforeAll(async () => {
  server = createServer((socket) => {
    sockets.add(socket); // read nothing, answer nothing
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((r) => server.close(r));
});

describe("a QStash that never answers", () => {
  it("ends the sweep's dead-letter reading at its timeout, answered rather than thrown", async () => {
    const dlq = createQStashDeadLetters({ baseUrl, token: "t", timeoutMs: 300 });
    const started = Date.now();
    const collected = await collectDeadLetters(t.db as unknown as Db, dlq, {
      label: "edge-outbox-test",
      publicUrl: "https://outbox.example.com",
    });
    expect(collected).toEqual({
      recorded: 0,
      removed: 0,
      qstashError: "QStash did not answer a dead-letter listing within 0.3 s",
    });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("ends the canary's publish at its timeout, as a publish QStash did not take", async () => {
    const queue = createQStashCanaryQueue({
      baseUrl,
      token: "t",
      publicUrl: "https://outbox.example.com",
      label: "edge-outbox-test",
      timeoutMs: 300,
    });
    const error = await queue.send({ canaryId: crypto.randomUUID(), label: "edge-outbox-test" }).then(
      () => expect.fail("published"),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PublishError);
    expect((error as PublishError).message).toBe(
      "QStash unreachable: Error: QStash did not answer the canary's publish within 0.3 s",
    );
  });
});
