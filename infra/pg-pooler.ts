// A transaction-mode Postgres pooler for the local stack, standing in for Neon's
// pooled endpoint (PgBouncer in transaction mode, the `-pooler` host). A Worker
// opens a fresh connection per invocation; without a pooler every one of them
// costs Postgres a backend start (ADR 0011: half of a delivery's CPU). Here
// clients are answered by the pooler itself and borrow one of a bounded set of
// server connections from their first message until the server is idle again
// (ReadyForQuery 'I'), so a transaction, and the relay's claim … publish … mark
// across round trips, always stays on one backend. ADR 0015 says why it is
// hand-written (no npm library fits) and what it does not do.
import net from "node:net";
import { randomBytes, randomInt, timingSafeEqual } from "node:crypto";
import pg from "pg";

export interface PoolerOptions {
  /** The Postgres behind the pooler, with its credentials (any auth pg speaks: trust, password, md5, SCRAM). */
  upstreamUrl: string;
  /** Server connections at most, open or opening (PgBouncer's pool size). */
  maxServerConnections?: number;
  /** How long a client waits for a free server connection before it is refused. */
  acquireTimeoutMs?: number;
  /**
   * How long a server connection may sit idle before it is closed (PgBouncer's
   * server_idle_timeout, whose default this is: 600 s). Without it, the pool kept as
   * many backends as its busiest moment ever needed: a soak left 34 idle.
   */
  serverIdleTimeoutMs?: number;
  log?: (line: string) => void;
}

export interface PoolerStats {
  /** Client connections answered (each would have been a backend start without the pooler). */
  clients: number;
  /** Server connections opened so far: the backend starts actually paid. */
  serverConnectionsOpened: number;
  /** Server connections open or opening now, and how many of them idle in the pool. */
  serverConnections: number;
  idle: number;
  /** Clients waiting for a server connection now, and the most that ever waited at once. */
  waiting: number;
  peakWaiting: number;
  /** Clients refused because no server connection came free in time. */
  waitTimeouts: number;
  /** Server connections closed while a client was attached: the backend died, or the client left mid-transaction. */
  closedWhileAttached: number;
  cancelRequests: number;
}

/** How the pooler talks back to one client (a WebSocket, a socket, a test's buffer). */
export interface ClientLink {
  send(bytes: Buffer): void;
  /** Ends the client's connection, after whatever was sent. */
  close(): void;
}

/** One client connection: feed it what the client sent, and tell it when the client went away. */
export interface ClientSession {
  receive(bytes: Buffer): void;
  closed(): void;
}

export interface PgPooler {
  /** The connection string a client uses: the upstream's host, user and database, and the password the pooler checks. */
  clientUrl: string;
  /** `host:port` of the upstream, the address a client's driver names. */
  upstreamAddress: string;
  serve(link: ClientLink): ClientSession;
  stats(): PoolerStats;
  close(): Promise<void>;
}

const PROTOCOL_3_0 = 196608;
const SSL_REQUEST = 80877103;
const GSS_ENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
/** Messages the server answers with exactly one ReadyForQuery: simple Query, Sync, FunctionCall. */
const ENDS_A_CYCLE = new Set([0x51, 0x53, 0x46]);

/** A connection to the upstream, taken over from pg once it is authenticated and ready. */
interface ServerConnection {
  socket: net.Socket;
  /** The backend's own cancel key, used when a client attached to it sends a CancelRequest. */
  pid: number;
  secret: number;
  /** The client attached, from its first message to the next idle ReadyForQuery. */
  client?: { fromServer(messages: Buffer[]): void; serverLost(): void };
  /** While it idles in the pool: what closes it after serverIdleTimeoutMs. */
  idleTimer?: NodeJS.Timeout;
}

interface Waiter {
  resolve(server: ServerConnection): void;
  reject(error: Error): void;
  timer: ReturnType<typeof setTimeout>;
}

export function startPgPooler(options: PoolerOptions): PgPooler {
  const upstream = new URL(options.upstreamUrl);
  const user = decodeURIComponent(upstream.username) || "postgres";
  const database = decodeURIComponent(upstream.pathname.slice(1)) || user;
  // A trust server has no password to check: the pooler makes one up, so every
  // client authenticates (and can pipeline its connect, as it does against Neon).
  const password = decodeURIComponent(upstream.password) || randomBytes(18).toString("base64url");
  const clientUrl = new URL(options.upstreamUrl);
  clientUrl.password = encodeURIComponent(password);
  const upstreamHost = upstream.hostname.replace(/^\[|\]$/g, "");
  const upstreamPort = Number(upstream.port || 5432);
  const max = options.maxServerConnections ?? 40;
  const acquireTimeoutMs = options.acquireTimeoutMs ?? 10_000;
  const serverIdleTimeoutMs = options.serverIdleTimeoutMs ?? 600_000;
  const log = options.log ?? (() => undefined);

  const idle: ServerConnection[] = [];
  const waiters: Waiter[] = [];
  const sessions = new Set<Session>();
  const byCancelKey = new Map<string, Session>();
  let open = 0;
  let closing = false;
  /** ParameterStatus values as a real server sent them, replayed to every client at start-up. */
  let serverParameters: Buffer | undefined;
  const counts = {
    clients: 0,
    serverConnectionsOpened: 0,
    peakWaiting: 0,
    waitTimeouts: 0,
    closedWhileAttached: 0,
    cancelRequests: 0,
  };

  async function openServer(): Promise<ServerConnection> {
    // pg does the authentication (every method it supports) and start-up; the
    // pooler then takes its socket over, between messages: the server sends
    // nothing after ReadyForQuery until it is asked.
    const client = new pg.Client({
      connectionString: options.upstreamUrl,
      connectionTimeoutMillis: acquireTimeoutMs,
    });
    const parameters: Buffer[] = [];
    client.connection.on("parameterStatus", (m: { parameterName: string; parameterValue: string }) =>
      parameters.push(message(0x53, cstring(m.parameterName), cstring(m.parameterValue))),
    );
    client.on("error", () => undefined);
    await client.connect();
    serverParameters ??= Buffer.concat(parameters);
    const socket = client.connection.stream as net.Socket;
    for (const event of ["data", "error", "close", "end"]) socket.removeAllListeners(event);
    counts.serverConnectionsOpened++;
    const server: ServerConnection = {
      socket,
      pid: (client as unknown as { processID: number }).processID,
      secret: (client as unknown as { secretKey: number }).secretKey,
    };
    const frames = new Framer(true);
    socket.on("data", (chunk: Buffer) => {
      const messages = frames.push(chunk);
      if (messages.length > 0) server.client?.fromServer(messages);
      // An idle server's unprompted messages (a notice, a FATAL before it closes) have no one to go to.
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      open--;
      const at = idle.indexOf(server);
      if (at >= 0) idle.splice(at, 1);
      if (server.client) {
        counts.closedWhileAttached++;
        // Cut the client too: its transaction is gone, and it must see that, not a fresh backend.
        server.client.serverLost();
      }
      dispatch();
    });
    return server;
  }

  /** Hands idle or new server connections to waiting clients, oldest first. */
  function dispatch() {
    while (waiters.length > 0 && !closing) {
      const server = idle.pop();
      if (server) {
        clearTimeout(server.idleTimer);
        const waiter = waiters.shift()!;
        clearTimeout(waiter.timer);
        waiter.resolve(server);
        continue;
      }
      if (open >= max) return;
      const waiter = waiters.shift()!;
      clearTimeout(waiter.timer);
      open++;
      openServer().then(waiter.resolve, (error: Error) => {
        open--;
        waiter.reject(error);
        dispatch();
      });
    }
  }

  function acquire(): Promise<ServerConnection> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const at = waiters.indexOf(waiter);
          if (at < 0) return;
          waiters.splice(at, 1);
          counts.waitTimeouts++;
          reject(
            new PoolerError(
              "08P01",
              `pooler: no server connection free within ${acquireTimeoutMs} ms (all ${max} busy)`,
            ),
          );
        }, acquireTimeoutMs),
      };
      waiters.push(waiter);
      counts.peakWaiting = Math.max(counts.peakWaiting, waiters.length);
      dispatch();
    });
  }

  function release(server: ServerConnection) {
    server.client = undefined;
    if (closing || server.socket.destroyed) return;
    idle.push(server);
    // Its close handler takes it out of the pool and the count.
    server.idleTimer = setTimeout(() => server.socket.destroy(), serverIdleTimeoutMs);
    server.idleTimer.unref();
    dispatch();
  }

  /** Where the client stands in its life: start-up, waiting for its password, then taking queries. */
  type Phase = "startup" | "password" | "ready" | "closed";

  class Session implements ClientSession {
    private phase: Phase = "startup";
    private readonly frames = new Framer(false);
    private pending: Buffer[] = [];
    private pumping = false;
    /** The server connection this client holds, from its first message to the server's next idle ReadyForQuery. */
    server?: ServerConnection;
    /** ReadyForQuery messages the server still owes for what was sent. */
    private owed = 0;
    /** Frames sent since the last one that ends a cycle (e.g. Parse/Bind before their Sync). */
    private unsynced = false;
    private readonly cancelKey = { pid: randomInt(1, 2 ** 31 - 1), secret: randomInt(0, 2 ** 31 - 1) };

    constructor(private readonly link: ClientLink) {
      sessions.add(this);
      byCancelKey.set(keyOf(this.cancelKey.pid, this.cancelKey.secret), this);
    }

    receive(bytes: Buffer) {
      if (this.phase === "closed") return;
      try {
        this.pending.push(...this.frames.push(bytes));
      } catch (error) {
        this.fail("08P01", (error as Error).message);
        return;
      }
      void this.pump();
    }

    closed() {
      if (this.phase === "closed") return;
      this.phase = "closed";
      this.detach(true);
      sessions.delete(this);
      byCancelKey.delete(keyOf(this.cancelKey.pid, this.cancelKey.secret));
    }

    /** Takes the client's messages in order; waits (for a server connection, the first parameters) without reordering. */
    private async pump() {
      if (this.pumping) return;
      this.pumping = true;
      try {
        while (this.pending.length > 0 && this.phase !== "closed") {
          const frame = this.pending.shift()!;
          if (this.phase === "startup") await this.startup(frame);
          else if (this.phase === "password") await this.password(frame);
          else await this.query(frame);
        }
      } catch (error) {
        const code = error instanceof PoolerError ? error.code : "08006";
        this.fail(code, (error as Error).message);
      } finally {
        this.pumping = false;
        this.flush();
      }
    }

    /** Frames bound for the server, written together: one write per client burst, not one per message. */
    private outbound: Buffer[] = [];

    private flush() {
      if (this.outbound.length === 0) return;
      const bytes = this.outbound.length === 1 ? this.outbound[0]! : Buffer.concat(this.outbound);
      this.outbound = [];
      this.server?.socket.write(bytes);
    }

    private async startup(frame: Buffer) {
      const code = frame.readInt32BE(4);
      if (code === SSL_REQUEST || code === GSS_ENC_REQUEST) {
        this.link.send(Buffer.from("N"));
        return;
      }
      if (code === CANCEL_REQUEST) {
        cancel(frame.readInt32BE(8), frame.readInt32BE(12));
        this.link.close();
        this.closed();
        return;
      }
      if (code !== PROTOCOL_3_0)
        throw new PoolerError("0A000", `pooler: unsupported protocol ${code >> 16}.${code & 0xffff}`);
      const parameters = startupParameters(frame);
      const asUser = parameters.user ?? "";
      const asDatabase = parameters.database || asUser;
      if (asUser !== user)
        throw new PoolerError("28000", `pooler: serves user "${user}" only, not "${asUser}"`);
      if (asDatabase !== database)
        throw new PoolerError("3D000", `pooler: serves database "${database}" only, not "${asDatabase}"`);
      counts.clients++;
      // As Postgres with `password` auth: a cleartext password request, which a
      // pipelining client has answered already (it is the next frame).
      this.link.send(message(0x52, int32(3)));
      this.phase = "password";
    }

    private async password(frame: Buffer) {
      const given = frame[0] === 0x70 ? frame.subarray(5, frame.length - 1) : Buffer.alloc(0);
      const expected = Buffer.from(password);
      if (given.length !== expected.length || !timingSafeEqual(given, expected))
        throw new PoolerError("28P01", `password authentication failed for user "${user}"`);
      if (serverParameters === undefined) {
        // The first client ever: learn the server's parameters from a real connection.
        release(await acquire());
      }
      this.link.send(
        Buffer.concat([
          message(0x52, int32(0)),
          serverParameters!,
          message(0x4b, int32(this.cancelKey.pid), int32(this.cancelKey.secret)),
          message(0x5a, Buffer.from("I")),
        ]),
      );
      this.phase = "ready";
    }

    private async query(frame: Buffer) {
      const type = frame[0]!;
      if (type === 0x58) {
        // Terminate: the client is done. Its server connection (if a transaction
        // was left open) is closed, never handed on mid-transaction.
        this.outbound = [];
        this.link.close();
        this.closed();
        return;
      }
      if (!this.server) {
        const server = await acquire();
        if (this.phase === "closed") {
          release(server);
          return;
        }
        server.client = this;
        this.server = server;
      }
      // Written when the burst is taken (pump's end): nothing can release the server
      // in between, as its replies are handled only once this synchronous run is over.
      this.outbound.push(frame);
      if (ENDS_A_CYCLE.has(type)) {
        this.owed++;
        this.unsynced = false;
      } else {
        this.unsynced = true;
      }
    }

    fromServer(messages: Buffer[]) {
      let idleAfter = false;
      for (const m of messages) {
        if (m[0] !== 0x5a) continue;
        this.owed--;
        idleAfter = m[5] === 0x49;
      }
      this.link.send(messages.length === 1 ? messages[0]! : Buffer.concat(messages));
      // Released only when idle with nothing more in flight: inside a transaction
      // ('T', 'E') or with statements sent after this Sync, the backend stays this client's.
      if (idleAfter && this.owed === 0 && !this.unsynced) this.detach(false);
    }

    serverLost() {
      this.server = undefined;
      this.link.close();
      this.closed();
    }

    /** Gives the server connection back; `abandoned` (the client left) closes it unless it is idle. */
    private detach(abandoned: boolean) {
      const server = this.server;
      if (!server) return;
      this.server = undefined;
      if (abandoned) {
        counts.closedWhileAttached++;
        server.client = undefined;
        server.socket.destroy();
        return;
      }
      this.owed = 0;
      release(server);
    }

    private fail(code: string, text: string) {
      if (this.phase === "closed") return;
      this.link.send(errorResponse("FATAL", code, text));
      this.link.close();
      this.closed();
    }
  }

  function cancel(pid: number, secret: number) {
    counts.cancelRequests++;
    const server = byCancelKey.get(keyOf(pid, secret))?.server;
    if (!server) return; // unknown key or not attached: nothing runs, as Postgres ignores a stale key
    const socket = net.connect({ host: upstreamHost, port: upstreamPort });
    socket.on("error", () => undefined);
    socket.end(Buffer.concat([int32(16), int32(CANCEL_REQUEST), int32(server.pid), int32(server.secret)]));
  }

  return {
    clientUrl: clientUrl.toString(),
    upstreamAddress: `${upstreamHost}:${upstreamPort}`,
    serve: (link) => new Session(link),
    stats: () => ({
      clients: counts.clients,
      serverConnectionsOpened: counts.serverConnectionsOpened,
      serverConnections: open,
      idle: idle.length,
      waiting: waiters.length,
      peakWaiting: counts.peakWaiting,
      waitTimeouts: counts.waitTimeouts,
      closedWhileAttached: counts.closedWhileAttached,
      cancelRequests: counts.cancelRequests,
    }),
    async close() {
      closing = true;
      for (const waiter of waiters.splice(0)) {
        clearTimeout(waiter.timer);
        waiter.reject(new PoolerError("57P01", "pooler: shutting down"));
      }
      for (const session of [...sessions]) session.serverLost();
      for (const server of idle.splice(0)) {
        clearTimeout(server.idleTimer);
        server.socket.destroy();
      }
      log(`pooler closed: ${JSON.stringify(this.stats())}`);
    },
  };
}

class PoolerError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Splits a byte stream into whole protocol messages: a type byte and an int32
 * length that counts itself. A client's first message (start-up, SSL or cancel
 * request) has no type byte; `typed` says whether the first one has.
 */
export class Framer {
  private buffered = Buffer.alloc(0);
  constructor(private typed: boolean) {}

  push(chunk: Buffer): Buffer[] {
    let data = this.buffered.length > 0 ? Buffer.concat([this.buffered, chunk]) : chunk;
    const out: Buffer[] = [];
    for (;;) {
      const head = this.typed ? 1 : 0;
      if (data.length < head + 4) break;
      const length = data.readInt32BE(head);
      if (length < 4 || length > 1 << 30) throw new Error(`pooler: malformed message length ${length}`);
      const end = head + length;
      if (data.length < end) break;
      out.push(data.subarray(0, end));
      data = data.subarray(end);
      // Only the start-up exchange is untyped; an SSL request is followed by another untyped start-up.
      if (!this.typed && !isSslOrGss(out[out.length - 1]!)) this.typed = true;
    }
    this.buffered = data.length > 0 ? Buffer.from(data) : Buffer.alloc(0);
    return out;
  }
}

function isSslOrGss(frame: Buffer): boolean {
  if (frame.length !== 8) return false;
  const code = frame.readInt32BE(4);
  return code === SSL_REQUEST || code === GSS_ENC_REQUEST;
}

function startupParameters(frame: Buffer): Record<string, string> {
  const parameters: Record<string, string> = {};
  const parts = frame.subarray(8).toString("utf8").split("\0");
  for (let i = 0; i + 1 < parts.length && parts[i] !== ""; i += 2) parameters[parts[i]!] = parts[i + 1]!;
  return parameters;
}

function keyOf(pid: number, secret: number): string {
  return `${pid}:${secret}`;
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}

function cstring(s: string): Buffer {
  return Buffer.from(`${s}\0`, "utf8");
}

function message(type: number, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  const head = Buffer.alloc(5);
  head[0] = type;
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

function errorResponse(severity: "FATAL" | "ERROR", code: string, text: string): Buffer {
  return message(
    0x45,
    Buffer.from("S"),
    cstring(severity),
    Buffer.from("V"),
    cstring(severity),
    Buffer.from("C"),
    cstring(code),
    Buffer.from("M"),
    cstring(text),
    Buffer.from([0]),
  );
}
