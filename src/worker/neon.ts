import type { neonConfig as NeonConfigObject } from "@neondatabase/serverless";

/**
 * Routes the Neon driver through a plain-WebSocket proxy (`host:port`) in front of
 * an ordinary Postgres: the local stack, never production. Each setting is
 * required there, as measured:
 * - the proxy speaks ws://, not wss://;
 * - pipelined connect sends the password before the server has asked for it,
 *   which only Neon's own proxy accepts; a real Postgres with SCRAM auth refuses;
 * - the driver dials `host:port` from the connection string through the proxy.
 */
export function useLocalWsProxy(config: typeof NeonConfigObject, proxyAddress: string): void {
  config.wsProxy = (host, port) => `${proxyAddress}/v1?address=${host}:${port}`;
  config.useSecureWebSocket = false;
  config.pipelineConnect = false;
}
