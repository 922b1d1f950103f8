import { afterAll, beforeAll } from "vitest";
import { startWorkerdStack, type WorkerdStack, type WorkerdStackOptions } from "../../infra/workerd-stack.ts";
import type { Bindings } from "../../src/worker/env.ts";
import type { TestDatabase } from "./db.ts";
import { bindings } from "./worker.ts";

export type { WorkerdStack } from "../../infra/workerd-stack.ts";

/**
 * The whole local stack around the real Worker bundle in workerd
 * (infra/workerd-stack.ts), one per test file, on this file's database, with
 * the test bindings; `extra` wins over everything, the stack's own included.
 */
export function useWorkerd(
  t: TestDatabase,
  extra: Partial<Bindings> = {},
  options: { qstashTimeScale?: number; rateLimit?: WorkerdStackOptions["rateLimit"] } = {},
): WorkerdStack {
  const stack = {} as WorkerdStack;

  beforeAll(async () => {
    const started = await startWorkerdStack({
      databaseUrl: t.url,
      // Retry backoff compressed (1 s → 10 ms) so retries and failure callbacks happen within a test;
      // a file that needs real seconds between attempts (fresh webhook timestamps) asks for scale 1.
      qstash: { timeScale: options.qstashTimeScale ?? 0.01 },
      bindings: bindings({
        // Test receivers (the sink) listen on 127.0.0.1 over http.
        WEBHOOK_ALLOW_PRIVATE_URLS: "true",
      }),
      overrides: extra,
      ...(options.rateLimit ? { rateLimit: options.rateLimit } : {}),
    });
    // The object handed out already: tests hold it from before their beforeAll ran.
    Object.assign(stack, started);
    // Bundling and booting a Worker, five files at once beside the rest of the suite on
    // two cores, once took longer than the 60 s default: a start-up budget, not a test.
  }, 150_000);

  afterAll(async () => {
    await stack.close?.();
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
