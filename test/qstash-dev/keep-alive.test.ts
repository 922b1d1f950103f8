import http from "node:http";
import net from "node:net";
import { Client } from "@upstash/qstash";
import { afterEach, describe, expect, it } from "vitest";
import { deliver } from "../../infra/qstash-dev/delivery.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";

/**
 * A destination that keeps a connection alive after its first answer and then
 * closes it without answering when the next request arrives on it: what a server
 * closing an idle kept-alive socket does to a request sent at that moment (wrangler
 * dev closes them after 5 s). Fresh connections are answered 200. `requests` counts
 * the requests each connection carried, in connection order.
 */
async function startDroppingDestination() {
  const requests: number[] = [];
  const server = net.createServer((socket) => {
    const index = requests.push(0) - 1;
    let buffered = "";
    socket.on("data", (data) => {
      buffered += data.toString("latin1");
      // Each request here is a small POST with Content-Length: complete once its body is in.
      for (;;) {
        const end = buffered.indexOf("\r\n\r\n");
        if (end < 0) return;
        const length = Number(/content-length: *(\d+)/i.exec(buffered.slice(0, end))?.[1] ?? 0);
        if (buffered.length < end + 4 + length) return;
        buffered = buffered.slice(end + 4 + length);
        requests[index]!++;
        if (requests[index] === 1 && index === 0) {
          socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok");
        } else if (index === 0) {
          socket.destroy();
          return;
        } else {
          socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok");
        }
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
      }),
  };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("kept-alive connections to destinations", () => {
  it("a request the destination drops on a reused socket is sent again on a fresh one", async () => {
    const destination = await startDroppingDestination();
    const agent = new http.Agent({ keepAlive: true });
    cleanups.push(destination.close, () => agent.destroy());
    const attempt = () =>
      deliver({
        url: destination.url,
        method: "POST",
        headers: { "content-type": "application/json" },
        body: Buffer.from("{}"),
        timeoutMs: 5_000,
        signal: new AbortController().signal,
        agent,
      });

    expect((await attempt()).status).toBe(200);
    const second = await attempt();
    expect(second.error).toBeUndefined();
    expect(second.status).toBe(200);
    expect(second.body.toString()).toBe("ok");
    // The first connection carried both requests (the second was dropped), the
    // second connection the request sent again.
    expect(destination.requests).toEqual([2, 1]);
  });

  it("a reset on a fresh socket is the attempt's failure, not sent again", async () => {
    // Accepts, reads, closes: every connection is fresh, so nothing is retried here.
    let connections = 0;
    const server = net.createServer((socket) => {
      connections++;
      socket.once("data", () => socket.destroy());
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { port } = server.address() as net.AddressInfo;
    const result = await deliver({
      url: `http://127.0.0.1:${port}/`,
      method: "POST",
      headers: {},
      body: Buffer.from("{}"),
      timeoutMs: 5_000,
      signal: new AbortController().signal,
      agent: new http.Agent({ keepAlive: true }),
    });
    expect(result.status).toBeUndefined();
    expect(result.error).toBe("socket hang up");
    expect(connections).toBe(1);
  });

  it("through the dev server: the dropped request costs the message none of its retries", async () => {
    const destination = await startDroppingDestination();
    const dev: QStashDev = await startQStashDev({ timeScale: 0.001 });
    cleanups.push(destination.close, () => dev.close());
    const client = new Client({ baseUrl: dev.url, token: dev.token, devMode: false, enableTelemetry: false });

    const first = await client.publishJSON({ url: destination.url, body: { n: 1 }, retries: 3 });
    expect((await dev.waitForSettled(first.messageId)).state).toBe("DELIVERED");
    const second = await client.publishJSON({ url: destination.url, body: { n: 2 }, retries: 3 });
    const settled = await dev.waitForSettled(second.messageId);
    expect(settled.state).toBe("DELIVERED");
    // One attempt, answered 200: no "socket hang up" attempt and no retry spent.
    expect(settled.attempts.map((a) => a.status)).toEqual([200]);
    expect(destination.requests).toEqual([2, 1]);
  });
});
