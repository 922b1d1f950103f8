import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface Received {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

/**
 * A real HTTP destination on 127.0.0.1:0. Tests change `respond` mid-run to make
 * it fail or succeed, and can hold requests open (`hold`) to observe concurrency.
 */
export async function startReceiver() {
  const received: Received[] = [];
  const listeners = new Set<() => void>();
  // Per path, so a request another test left hanging does not count here.
  const active = new Map<string, number>();
  const maxActive = new Map<string, number>();
  const state = {
    respond: (_r: Received): Answer | Promise<Answer> => ({ status: 200, body: "ok" }),
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "";
      const now = (active.get(path) ?? 0) + 1;
      active.set(path, now);
      maxActive.set(path, Math.max(maxActive.get(path) ?? 0, now));
      const record: Received = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
        at: Date.now(),
      };
      received.push(record);
      for (const l of [...listeners]) l();
      void Promise.resolve(state.respond(record)).then((answer) => {
        active.set(path, (active.get(path) ?? 1) - 1);
        res.writeHead(answer.status, answer.headers ?? {});
        res.end(answer.body ?? "");
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const base = `http://127.0.0.1:${port}`;
  return {
    base,
    url: (path: string) => `${base}${path}`,
    received,
    state,
    /** Highest number of requests to `path` in flight at once since the last reset(). */
    maxActive: (path: string) => maxActive.get(path) ?? 0,
    reset() {
      received.length = 0;
      maxActive.clear();
      state.respond = () => ({ status: 200, body: "ok" });
    },
    /** Resolves once `count` requests matching `path` have arrived (signal-based, no polling). */
    waitForRequests(count: number, path?: string, timeoutMs = 10_000): Promise<Received[]> {
      return new Promise((resolve, reject) => {
        const matching = () => received.filter((r) => path === undefined || r.path === path);
        const check = () => {
          const list = matching();
          if (list.length >= count) {
            clearTimeout(timer);
            listeners.delete(check);
            resolve(list);
          }
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`receiver: wanted ${count} requests to ${path ?? "*"}, got ${matching().length}`));
        }, timeoutMs);
        listeners.add(check);
        check();
      });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
