// A WebSocket-to-TCP proxy so @neondatabase/serverless, which only speaks Postgres
// over WebSockets (as Workers must), reaches a plain local Postgres. Local use only:
// it forwards to whatever `address` the client names, so it listens on loopback.
// With `pool`, it is Neon's pooled endpoint instead: every client is answered by a
// transaction-mode pooler (pg-pooler.ts) in front of one upstream, as the Worker's
// connections are by PgBouncer behind Neon's `-pooler` host.
import type { IncomingMessage } from "node:http";
import net from "node:net";
import { Transform, pipeline } from "node:stream";
import { WebSocketServer, createWebSocketStream } from "ws";
import ws from "ws";
import { Client, neonConfig } from "@neondatabase/serverless";
import { useLocalWsProxy } from "../src/worker/neon.ts";
import { startPgPooler, type PgPooler, type PoolerOptions, type PoolerStats } from "./pg-pooler.ts";

export interface WsProxy {
  port: number;
  /** `127.0.0.1:<port>`: the value for the Worker's NEON_WS_PROXY binding. */
  address: string;
  url: string;
  /**
   * With `pool`: the connection string clients use through the pooler (the
   * upstream's, with the password the pooler checks), as a deployment uses Neon's
   * pooled string. Undefined for a direct proxy.
   */
  pooledUrl?: string;
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
  /** The pooler's figures, when pooled. */
  pool?: PoolerStats;
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
  /**
   * Pool server connections to this upstream (transaction mode), as Neon's pooled
   * endpoint does; clients must then use `pooledUrl`, and may name no other address.
   */
  pool?: Omit<PoolerOptions, "log">;
}

export async function startWsProxy(options: WsProxyOptions = {}): Promise<WsProxy> {
  const server = new WebSocketServer({
    host: "127.0.0.1",
    port: options.port ?? 0,
    // A browser sends Origin with every WebSocket handshake, and a web page may open
    // one to 127.0.0.1: any page the developer visited could reach the local Postgres
    // through it (when its password was the well-known `postgres`, as its superuser).
    // The Neon driver, from Node's ws or from workerd, sends none: only such clients
    // are let in.
    verifyClient: ({ req }: { req: IncomingMessage }) => req.headers.origin === undefined,
  });
  const sockets = new Set<net.Socket>();
  let delayMs = options.delayMs ?? 0;
  const counts: WsProxyStats = { connections: 0, clientFrames: 0, roundTrips: 0 };

  const pooler: PgPooler | undefined = options.pool
    ? startPgPooler({ ...options.pool, log: options.log })
    : undefined;

  server.on("connection", (socket, request) => {
    // The Neon driver asks for `/v1?address=host:port` (see neonConfig.wsProxy).
    const target = new URL(request.url ?? "/", "http://proxy").searchParams.get("address");
    const match = target?.match(/^(.+):(\d+)$/);
    if (!match) {
      socket.close(1008, "expected ?address=host:port");
      return;
    }
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
    if (pooler) {
      if (target !== pooler.upstreamAddress) {
        socket.close(1008, `this pooled proxy serves ${pooler.upstreamAddress} only`);
        return;
      }
      servePooled(pooler, socket, delayMs, () => (awaitingReply = false));
      return;
    }
    const [, host, port] = match;
    const tcp = net.connect({ host: host!, port: Number(port) });
    tcp.setNoDelay(true);
    sockets.add(tcp);
    tcp.on("close", () => sockets.delete(tcp));
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
    if (delayMs > 0) pipeline(tcp, delayedInOrder(delayMs), stream, done);
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
    pooledUrl: pooler?.clientUrl,
    stats: () => ({ ...counts, ...(pooler ? { pool: pooler.stats() } : {}) }),
    setDelayMs(ms) {
      if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`delayMs must be ≥ 0, got ${ms}`);
      delayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve) => {
        void pooler?.close();
        for (const client of server.clients) client.terminate();
        for (const tcp of sockets) tcp.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * One WebSocket client of the pooler: its frames in, the pooler's replies out
 * (after the added delay, in order), and either side's close ends both.
 */
function servePooled(pooler: PgPooler, socket: ws, delayMs: number, replied: () => void) {
  let delayed: Transform | undefined;
  const send = (bytes: Buffer) => {
    replied();
    if (socket.readyState === socket.OPEN) socket.send(bytes);
  };
  if (delayMs > 0) {
    delayed = delayedInOrder(delayMs);
    delayed.on("data", send);
    delayed.on("end", () => socket.close());
  }
  const session = pooler.serve({
    send: (bytes) => (delayed ? delayed.write(bytes) : send(bytes)),
    close: () => (delayed ? delayed.end() : socket.close()),
  });
  socket.on("message", (data: ws.RawData) => session.receive(asBuffer(data)));
  socket.on("close", () => session.closed());
  socket.on("error", () => session.closed());
}

function asBuffer(data: ws.RawData): Buffer {
  return Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
}

/** The Postgres Terminate message ('X', length 4), alone in a frame. */
function isTerminate(data: ws.RawData): boolean {
  const bytes = asBuffer(data);
  return bytes.length === 5 && bytes[0] === 0x58 && bytes.readInt32BE(1) === 4;
}

/**
 * Passes each chunk on `ms` after it arrived, in order: latency, not a bandwidth limit.
 * One FIFO and one timer for its head, not a timer per chunk: two timers set in
 * the same event-loop turn with delays computed a millisecond apart could fire
 * out of order (Node starts them from the turn's cached clock), and a reply
 * whose TCP chunks swapped places left the driver waiting forever, mid-message.
 */
export function delayedInOrder(ms: number): Transform {
  const queue: { at: number; chunk: Buffer }[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onEmpty: (() => void) | undefined;
  const release = (stream: Transform) => {
    timer = undefined;
    const now = Date.now();
    while (queue.length > 0 && queue[0]!.at <= now) stream.push(queue.shift()!.chunk);
    if (queue.length > 0) timer = setTimeout(() => release(stream), queue[0]!.at - now);
    else onEmpty?.();
  };
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      queue.push({ at: Date.now() + ms, chunk });
      if (timer === undefined) timer = setTimeout(() => release(this), ms);
      callback();
    },
    flush(callback) {
      if (queue.length === 0) return callback();
      onEmpty = () => callback();
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
