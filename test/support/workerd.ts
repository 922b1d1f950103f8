import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { unstable_startWorker } from "wrangler";
import { startMailSink, type MailSink } from "../../infra/mail-sink.ts";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import { startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { freePort } from "../../src/node/postgres.ts";
import type { Bindings } from "../../src/worker/env.ts";
import type { TestDatabase } from "./db.ts";
import { bindings } from "./worker.ts";

export interface WorkerdStack {
  /** Where the Worker listens; also its PUBLIC_URL, which QStash signs and delivers to. */
  url: string;
  env: Bindings;
  qstash: QStashDev;
  sink: MailSink;
  proxy: WsProxy;
  fetch(path: string, init?: RequestInit): Promise<Response>;
}

/**
 * The whole local stack around the real Worker bundle in workerd, one per test
 * file: the Neon driver through the WebSocket proxy to this file's database, the
 * QStash dev server publishing and delivering to the Worker's own URL, and the
 * mail sink as MAIL_API_URL. The port is picked before start because PUBLIC_URL
 * (a binding) must name the address QStash delivers to.
 */
export function useWorkerd(
  t: TestDatabase,
  extra: Partial<Bindings> = {},
  options: { qstashTimeScale?: number } = {},
): WorkerdStack {
  const stack = {} as WorkerdStack;
  let worker: Awaited<ReturnType<typeof unstable_startWorker>> | undefined;

  beforeAll(async () => {
    stack.proxy = await startWsProxy();
    // Retry backoff compressed (1 s → 10 ms) so retries and failure callbacks happen within a test;
    // a file that needs real seconds between attempts (fresh webhook timestamps) asks for scale 1.
    stack.qstash = await startQStashDev({ timeScale: options.qstashTimeScale ?? 0.01 });
    stack.sink = await startMailSink({ log: () => undefined });
    const port = await freePort();
    stack.url = `http://127.0.0.1:${port}`;
    stack.env = bindings({
      DATABASE_URL: t.url,
      NEON_WS_PROXY: stack.proxy.address,
      QSTASH_URL: stack.qstash.url,
      QSTASH_TOKEN: stack.qstash.token,
      QSTASH_CURRENT_SIGNING_KEY: stack.qstash.currentSigningKey,
      QSTASH_NEXT_SIGNING_KEY: stack.qstash.nextSigningKey,
      PUBLIC_URL: stack.url,
      MAIL_API_URL: `${stack.sink.url}/mail`,
      // Test receivers (the sink) listen on 127.0.0.1 over http.
      WEBHOOK_ALLOW_PRIVATE_URLS: "true",
      ...extra,
    });
    worker = await unstable_startWorker({
      // The deployable configuration (entry, compatibility date and flags), with test bindings.
      config: fileURLToPath(new URL("../../wrangler.toml", import.meta.url)),
      sendMetrics: false,
      bindings: Object.fromEntries(
        Object.entries(stack.env)
          .filter(([, value]) => value !== undefined)
          .map(([name, value]) => [name, { type: "plain_text" as const, value: value! }]),
      ),
      dev: {
        server: { hostname: "127.0.0.1", port },
        inspector: false,
        watch: false,
        persist: false,
        logLevel: "warn",
        testScheduled: true,
      },
    });
    await worker.ready;
    stack.fetch = (path, init) => fetch(`${stack.url}${path}`, init);
  });

  afterAll(async () => {
    await worker?.dispose();
    await Promise.all([stack.qstash?.close(), stack.sink?.close(), stack.proxy?.close()]);
  });

  return stack;
}

/** A JSON request to the stack's Worker, answered as status, headers and parsed body. */
export async function request(
  stack: WorkerdStack,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  const res = await stack.fetch(path, {
    method,
    headers: body === undefined ? headers : { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, headers: res.headers, body: (text ? JSON.parse(text) : undefined) as any };
}
