import type { neonConfig as NeonConfigObject } from "@neondatabase/serverless";

/**
 * Routes the Neon driver through a plain-WebSocket proxy (`host:port`) in front of
 * an ordinary Postgres: the local stack, never production. Each setting is
 * required there, as measured:
 * - the proxy speaks ws://, not wss://;
 * - the driver dials `host:port` from the connection string through the proxy;
 * - pipelined connect (the driver's default, and what Neon does) sends the password
 *   with the start-up message, before the server asks. A Postgres using `password`
 *   authentication, as the embedded one the local stack starts does, takes it, so
 *   the local path is the production one: one round trip to connect and no SCRAM,
 *   which costs about 35 ms of CPU per connection inside workerd. A server using
 *   `trust` or `scram-sha-256` refuses the early password: `pipelined: false` for those.
 */
export function useLocalWsProxy(
  config: typeof NeonConfigObject,
  proxyAddress: string,
  pipelined = true,
): void {
  config.wsProxy = (host, port) => `${proxyAddress}/v1?address=${host}:${port}`;
  config.useSecureWebSocket = false;
  config.pipelineConnect = pipelined ? "password" : false;
}
