import http from "node:http";
import type { Socket } from "node:net";

/**
 * A proxy in front of the QStash dev server's publish API that fails a share of
 * publishes at random, the way a flaky network and an overloaded QStash do. The dev
 * server's own injection fails "the next N" publishes; a random rate needs a
 * decision per request, and the chaos summary needs each fault counted, so the
 * decision lives here. Everything else (admin, deliveries) never passes through.
 */
export interface PublishFaults {
  url: string;
  /** Share of publishes answered 5xx (nothing reaches QStash). */
  set(options: Partial<FaultRates>): void;
  counts(): FaultCounts;
  close(): Promise<void>;
}

export interface FaultRates {
  serverErrorRate: number;
  /** Share held past the relay's publish timeout, then dropped: the publish never happened. */
  timeoutRate: number;
  /** Held this long before being dropped; above RELAY_POLICY.publishTimeoutMs. */
  timeoutMs: number;
  /** Every publish fails (connection reset): a transport outage. */
  down: boolean;
  /** Added before forwarding, to widen the window between publish and commit. */
  latencyMs: number;
}

export interface FaultCounts {
  publishes: number;
  forwarded: number;
  serverErrors: number;
  timeouts: number;
  outageRefusals: number;
}

export async function startPublishFaults(upstream: () => string): Promise<PublishFaults> {
  const rates: FaultRates = {
    serverErrorRate: 0,
    timeoutRate: 0,
    timeoutMs: 16_000,
    down: false,
    latencyMs: 0,
  };
  const counts: FaultCounts = { publishes: 0, forwarded: 0, serverErrors: 0, timeouts: 0, outageRefusals: 0 };
  const held = new Set<NodeJS.Timeout>();
  const sockets = new Set<Socket>();

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => void handle(req, res, Buffer.concat(chunks)));
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });

  async function handle(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer) {
    counts.publishes++;
    if (rates.down) {
      counts.outageRefusals++;
      return res.destroy();
    }
    const roll = Math.random();
    if (roll < rates.serverErrorRate) {
      counts.serverErrors++;
      const status = Math.random() < 0.5 ? 500 : 503;
      res.writeHead(status, { "content-type": "application/json" });
      return res.end(JSON.stringify({ error: `chaos: injected ${status}` }));
    }
    if (roll < rates.serverErrorRate + rates.timeoutRate) {
      counts.timeouts++;
      const timer = setTimeout(() => {
        held.delete(timer);
        res.destroy();
      }, rates.timeoutMs);
      held.add(timer);
      return;
    }
    if (rates.latencyMs > 0) await new Promise((r) => setTimeout(r, rates.latencyMs * Math.random()));
    try {
      const headers = Object.fromEntries(
        Object.entries(req.headers)
          .filter(([k]) => !["host", "content-length", "connection"].includes(k))
          .map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]),
      );
      const answer = await fetch(`${upstream()}${req.url ?? "/"}`, {
        method: req.method ?? "POST",
        headers,
        body: req.method === "GET" || req.method === "HEAD" ? undefined : new Uint8Array(body),
      });
      counts.forwarded++;
      const text = Buffer.from(await answer.arrayBuffer());
      res.writeHead(answer.status, {
        "content-type": answer.headers.get("content-type") ?? "application/json",
      });
      res.end(text);
    } catch {
      res.destroy();
    }
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("publish-faults: no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    set: (options) => Object.assign(rates, options),
    counts: () => ({ ...counts }),
    close: async () => {
      for (const timer of held) clearTimeout(timer);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
