// The local stack around the real Worker bundle in workerd, started from code:
// the Neon driver through the WebSocket proxy and its transaction-mode pooler to a
// given database (as a deployment reaches Neon's pooled endpoint), the QStash dev
// server publishing and delivering to the Worker's own URL, and the mail sink as
// MAIL_API_URL. The workerd tests (test/support/workerd.ts) and the write-receipt
// benchmark (bench/write-receipt.ts) both start it here.
import { fileURLToPath } from "node:url";
import { unstable_startWorker } from "wrangler";
import { startMailSink, type MailSink } from "./mail-sink.ts";
import { startQStashDev, type QStashDev, type QStashDevOptions } from "./qstash-dev/server.ts";
import { startWsProxy, type WsProxy, type WsProxyOptions } from "./ws-proxy.ts";
import { freePort } from "../src/node/postgres.ts";
import type { Bindings } from "../src/worker/env.ts";

export interface WorkerdStack {
  /** Where the Worker listens; also its PUBLIC_URL, which QStash signs and delivers to. */
  url: string;
  env: Bindings;
  qstash: QStashDev;
  sink: MailSink;
  proxy: WsProxy;
  fetch(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

export interface WorkerdStackOptions {
  databaseUrl: string;
  /**
   * Every other binding (ADMIN_TOKEN, WEBHOOK_SECRETS_KEY, …). The stack's own
   * (database, proxy, QStash, sink, PUBLIC_URL) replace any given here.
   */
  bindings: Bindings;
  /** Bindings that win even over the stack's own, e.g. a test's broken QSTASH_URL. */
  overrides?: Partial<Bindings>;
  qstash?: QStashDevOptions;
  /** Proxy options; `pool: false` connects the Worker straight to Postgres (a backend per connection). */
  proxy?: Omit<WsProxyOptions, "pool"> & {
    pool?: false | { maxServerConnections?: number; acquireTimeoutMs?: number };
  };
  /** Another checkout's wrangler.toml, e.g. a benchmark's "before"; this one's by default. */
  config?: string;
  /**
   * The tenant keys' request budget, in place of wrangler.toml's API_RATE_LIMIT.
   * By default one no test or benchmark reaches: they measure the system, not the
   * budget (a benchmark writes hundreds a second with one key). A test of the budget
   * sets a small one.
   */
  rateLimit?: { limit: number; period: 10 | 60 };
  /** wrangler's log level; "warn" keeps a test run's output clean. */
  logLevel?: "none" | "error" | "warn" | "info" | "log" | "debug";
  /**
   * Opens workerd's DevTools inspector on this port (off by default), e.g. to take a
   * CPU profile of the Worker under a benchmark's load (bench/profile-write.ts).
   */
  inspectorPort?: number;
  /** Picks the port the Worker listens on: a free one by default (a test's busy one to try a clash). */
  pickPort?: () => Promise<number>;
}

/** Ports tried for the Worker before giving up, when each turns out taken. */
const PORT_TRIES = 3;

/**
 * Starts the stack. The port is picked before the Worker starts because
 * PUBLIC_URL (a binding) must name the address QStash delivers to. Whatever
 * started is stopped again when a later part fails to start.
 */
export async function startWorkerdStack(options: WorkerdStackOptions): Promise<WorkerdStack> {
  const started: (() => Promise<unknown>)[] = [];
  const close = async () => {
    for (const stop of started.reverse()) await stop().catch(() => undefined);
  };
  try {
    const { pool, ...proxyOptions } = options.proxy ?? {};
    const proxy = await startWsProxy({
      ...proxyOptions,
      ...(pool === false ? {} : { pool: { ...pool, upstreamUrl: options.databaseUrl } }),
    });
    started.push(() => proxy.close());
    const qstash = await startQStashDev(options.qstash);
    started.push(() => qstash.close());
    const sink = await startMailSink({ log: () => undefined });
    started.push(() => sink.close());
    const common = {
      ...options.bindings,
      // Pooled: the pooler's connection string, whose password it checks, and a
      // pipelined connect, which it always takes (it answers the start-up itself).
      DATABASE_URL: proxy.pooledUrl ?? options.databaseUrl,
      ...(proxy.pooledUrl ? { NEON_PIPELINE_CONNECT: "password" } : {}),
      NEON_WS_PROXY: proxy.address,
      QSTASH_URL: qstash.url,
      QSTASH_TOKEN: qstash.token,
      QSTASH_CURRENT_SIGNING_KEY: qstash.currentSigningKey,
      QSTASH_NEXT_SIGNING_KEY: qstash.nextSigningKey,
      MAIL_API_URL: `${sink.url}/mail`,
      MAIL_TO: "ops@example.com",
    } satisfies Partial<Bindings>;
    // A local stack needs no real `request.cf`: without this, miniflare tries to fetch
    // it from workers.cloudflare.com and prints a stack trace when offline (as
    // `npm run dev` and CI already say for wrangler dev).
    process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";
    const { worker, url, env } = await startOnAFreePort(options, common);
    started.push(() => worker.dispose());
    return {
      url,
      env,
      qstash,
      sink,
      proxy,
      fetch: (path, init) => fetch(`${url}${path}`, init),
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

type StartedWorker = Awaited<ReturnType<typeof unstable_startWorker>>;

/**
 * The Worker on a port picked free. The port is left for workerd to bind after
 * bundling, seconds later, and another process can take it meanwhile: workerd then
 * fails to listen, wrangler reports that as an error event, and `ready` never
 * settles (a suite's start-up once hung past its budget). So a taken port is tried
 * again on another, and any other start-up error fails the start instead of hanging it.
 */
async function startOnAFreePort(
  options: WorkerdStackOptions,
  common: Bindings,
): Promise<{ worker: StartedWorker; url: string; env: Bindings }> {
  for (let attempt = 1; ; attempt++) {
    const port = await (options.pickPort ?? freePort)();
    const url = `http://127.0.0.1:${port}`;
    const env: Bindings = { ...common, PUBLIC_URL: url, ...options.overrides };
    const worker = await startWorker(options, env, port);
    try {
      await readyOrError(worker);
      return { worker, url, env };
    } catch (error) {
      // Not dispose(): it waits for the `ready` that never settles.
      await worker.raw.teardown().catch(() => undefined);
      if (!addressInUse(error) || attempt === PORT_TRIES) throw error;
    }
  }
}

/** workerd listening, or the first error wrangler reports while starting it. */
function readyOrError(worker: StartedWorker): Promise<void> {
  return new Promise((resolve, reject) => {
    worker.raw.once("error", reject);
    worker.ready.then(() => {
      worker.raw.off("error", reject);
      resolve();
    }, reject);
  });
}

function addressInUse(error: unknown): boolean {
  return error instanceof Error && error.message.includes("Address already in use");
}

function startWorker(options: WorkerdStackOptions, env: Bindings, port: number): Promise<StartedWorker> {
  return unstable_startWorker({
    // The deployable configuration (entry, compatibility date and flags), with these bindings.
    config: options.config ?? fileURLToPath(new URL("../wrangler.toml", import.meta.url)),
    sendMetrics: false,
    bindings: Object.fromEntries([
      ...Object.entries(env)
        .filter(([name, value]) => value !== undefined && name !== "API_RATE_LIMIT")
        .map(([name, value]) => [name, { type: "plain_text" as const, value: String(value) }]),
      [
        "API_RATE_LIMIT",
        // wrangler's own shape for a [[ratelimits]] entry (its Binding type is not exported).
        {
          type: "ratelimit",
          namespace_id: "1001",
          simple: options.rateLimit ?? { limit: 1_000_000, period: 10 },
        } as unknown as { type: "plain_text"; value: string },
      ],
    ]),
    dev: {
      server: { hostname: "127.0.0.1", port },
      inspector:
        options.inspectorPort === undefined ? false : { hostname: "127.0.0.1", port: options.inspectorPort },
      watch: false,
      persist: false,
      logLevel: options.logLevel ?? "warn",
      testScheduled: true,
    },
  });
}
