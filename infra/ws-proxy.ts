// A WebSocket-to-TCP proxy so @neondatabase/serverless, which only speaks Postgres
// over WebSockets (as Workers must), reaches a plain local Postgres. Local use only:
// it forwards to whatever `address` the client names, so it listens on loopback.
import net from "node:net";
import { pipeline } from "node:stream";
import { WebSocketServer, createWebSocketStream } from "ws";
import ws from "ws";
import { neonConfig } from "@neondatabase/serverless";
import { useLocalWsProxy } from "../src/worker/neon.ts";

export interface WsProxy {
  port: number;
  /** `127.0.0.1:<port>`: the value for the Worker's NEON_WS_PROXY binding. */
  address: string;
  url: string;
  close(): Promise<void>;
}

export interface WsProxyOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  log?: (line: string) => void;
}

export async function startWsProxy(options: WsProxyOptions = {}): Promise<WsProxy> {
  const server = new WebSocketServer({ host: "127.0.0.1", port: options.port ?? 0 });
  const sockets = new Set<net.Socket>();

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
    pipeline(tcp, stream, done);
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
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of server.clients) client.terminate();
        for (const tcp of sockets) tcp.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Points the Neon driver in this Node process at a local proxy. Node (20) has no
 * global WebSocket the driver accepts, hence the `ws` constructor; the rest is
 * the same configuration the Worker applies from its NEON_WS_PROXY binding.
 */
export function configureNeonForWsProxy(proxy: Pick<WsProxy, "address">): void {
  neonConfig.webSocketConstructor = ws;
  useLocalWsProxy(neonConfig, proxy.address);
}
