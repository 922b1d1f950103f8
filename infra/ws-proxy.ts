// A WebSocket-to-TCP proxy so @neondatabase/serverless, which only speaks Postgres
// over WebSockets (as Workers must), reaches a plain local Postgres. Local use only:
// it forwards to whatever `address` the client names, so it listens on loopback.
import net from "node:net";
import { Transform, pipeline } from "node:stream";
import { WebSocketServer, createWebSocketStream } from "ws";
import ws from "ws";
import { Client, neonConfig } from "@neondatabase/serverless";
import { useLocalWsProxy } from "../src/worker/neon.ts";

export interface WsProxy {
  port: number;
  /** `127.0.0.1:<port>`: the value for the Worker's NEON_WS_PROXY binding. */
  address: string;
  url: string;
  /** What has passed through so far, e.g. to count a request's round trips. */
  stats(): WsProxyStats;
  /** Changes the added delay for connections opened from now on (see WsProxyOptions.delayMs). */
  setDelayMs(ms: number): void;
  close(): Promise<void>;
}

export interface WsProxyStats {
  /** WebSocket connections opened (each is one Postgres connection). */
  connections: number;
  /** Frames the driver sent: with pipelining, one frame can carry several messages. */
  clientFrames: number;
  /**
   * Round trips: times the client sent after having heard from the server since
   * its previous send (or for the first time on a connection). Pipelined messages
   * sent back to back count once, as they cost one wait; the Terminate that
   * closes a connection waits for nothing and does not count.
   */
  roundTrips: number;
}

export interface WsProxyOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  log?: (line: string) => void;
  /**
   * Milliseconds added to every round trip, e.g. 10 to stand in for the distance
   * between a Worker and its Neon region. Postgres' replies are held this long
   * (order kept), so a burst of pipelined statements pays it once, as it would.
   */
  delayMs?: number;
}

export async function startWsProxy(options: WsProxyOptions = {}): Promise<WsProxy> {
  const server = new WebSocketServer({ host: "127.0.0.1", port: options.port ?? 0 });
  const sockets = new Set<net.Socket>();
  let delayMs = options.delayMs ?? 0;
  const counts: WsProxyStats = { connections: 0, clientFrames: 0, roundTrips: 0 };

  server.on("connection", (socket, request) => {
    // The Neon driver asks for `/v1?address=host:port` (see neonConfig.wsProxy).
    const target = new URL(request.url ?? "/", "http://proxy").searchParams.get("address");
    const match = target?.match(/^(.+):(\d+)$/);
    if (!match) {
      socket.close(1008, "expected ?address=host:port");
      return;
    }
    const [, host, port] = match;
    const tcp = net.connect({ host: host!, port: Number(port) });
    tcp.setNoDelay(true);
    sockets.add(tcp);
    tcp.on("close", () => sockets.delete(tcp));
    counts.connections += 1;
    // A new send after a reply is a new wait for the client: one round trip.
    let awaitingReply = false;
    socket.on("message", (data: ws.RawData) => {
      counts.clientFrames += 1;
      // A Terminate on its own ends the connection: nothing waits for an answer.
      if (isTerminate(data)) return;
      if (!awaitingReply) counts.roundTrips += 1;
      awaitingReply = true;
    });
    tcp.on("data", () => {
      awaitingReply = false;
    });
    // A stream over the WebSocket gives both directions backpressure; pipeline
    // tears the other side down when either closes or fails, so a Postgres that
    // goes away closes the client's WebSocket instead of leaving it hanging.
    const stream = createWebSocketStream(socket);
    const done = (error?: Error | null) => {
      if (error && options.log) options.log(`ws-proxy ${target}: ${error.message}`);
      tcp.destroy();
      stream.destroy();
    };
    pipeline(stream, tcp, done);
    // Read per connection: a Worker opens its connections per request, so a new
    // delay applies from the next request on without restarting anything.
    if (delayMs > 0) pipeline(tcp, delayed(delayMs), stream, done);
    else pipeline(tcp, stream, done);
  });

  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("ws-proxy: no listening address");
  const port = address.port;

  return {
    port,
    address: `127.0.0.1:${port}`,
    url: `ws://127.0.0.1:${port}/v1`,
    stats: () => ({ ...counts }),
    setDelayMs(ms) {
      if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`delayMs must be ≥ 0, got ${ms}`);
      delayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of server.clients) client.terminate();
        for (const tcp of sockets) tcp.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The Postgres Terminate message ('X', length 4), alone in a frame. */
function isTerminate(data: ws.RawData): boolean {
  const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
  return bytes.length === 5 && bytes[0] === 0x58 && bytes.readInt32BE(1) === 4;
}

/** Passes each chunk on `ms` after it arrived, in order: latency, not a bandwidth limit. */
function delayed(ms: number): Transform {
  let last = 0;
  return new Transform({
    transform(chunk, _encoding, callback) {
      // Chunks are released in arrival order even if timers fire late.
      const at = Math.max(Date.now() + ms, last);
      last = at;
      setTimeout(() => this.push(chunk), at - Date.now());
      callback();
    },
    flush(callback) {
      setTimeout(callback, Math.max(0, last - Date.now()));
    },
  });
}

/**
 * Points the Neon driver in this Node process at a local proxy. Node (20) has no
 * global WebSocket the driver accepts, hence the `ws` constructor; the rest is
 * the same configuration the Worker applies from its NEON_WS_PROXY and
 * NEON_PIPELINE_CONNECT bindings (the latter read here from the environment,
 * where the test set-up leaves it when its Postgres refuses a pipelined connect).
 */
export function configureNeonForWsProxy(
  proxy: Pick<WsProxy, "address">,
  pipelined = process.env.NEON_PIPELINE_CONNECT !== "off",
): void {
  neonConfig.webSocketConstructor = ws;
  useLocalWsProxy(neonConfig, proxy.address, pipelined);
}

/**
 * Whether the Postgres at `databaseUrl` takes a pipelined connect: true only for
 * `password` authentication (as Neon and the embedded server use). Tried for real,
 * through the proxy, since the server's pg_hba.conf may not be readable from here.
 */
export async function takesPipelinedConnect(
  proxy: Pick<WsProxy, "address">,
  databaseUrl: string,
): Promise<boolean> {
  neonConfig.webSocketConstructor = ws;
  useLocalWsProxy(neonConfig, proxy.address, true);
  const client = new Client({ connectionString: databaseUrl });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}
