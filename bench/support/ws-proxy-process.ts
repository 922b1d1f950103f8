/**
 * infra/ws-proxy.ts in its own process, standing in for Neon's WebSocket proxy and
 * the distance to it: argv[2] is the delay per database round trip in ms. Answers
 * `stats` with the proxy's counters (see service.ts).
 */
import { startWsProxy } from "../../infra/ws-proxy.ts";
import { serveCommands } from "./service.ts";

const proxy = await startWsProxy({ delayMs: Number(process.argv[2] ?? 0) });
serveCommands({ address: proxy.address }, { stats: () => proxy.stats() }, () => proxy.close());
