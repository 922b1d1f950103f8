import { Client } from "@upstash/qstash";
import { afterAll, beforeAll, beforeEach } from "vitest";
import { startQStashDev, type QStashDev, type QStashDevOptions } from "../../infra/qstash-dev/server.ts";
import { startReceiver } from "./receiver.ts";

/**
 * One dev server and one destination per test file; state reset before each test.
 * timeScale 0.001 turns QStash's 12 s first retry into 12 ms.
 */
export function useQStashDev(options: QStashDevOptions = {}) {
  const ctx = {} as {
    dev: QStashDev;
    receiver: Awaited<ReturnType<typeof startReceiver>>;
    client: Client;
  };
  beforeAll(async () => {
    ctx.dev = await startQStashDev({ timeScale: 0.001, ...options });
    ctx.receiver = await startReceiver();
    ctx.client = new Client({
      baseUrl: ctx.dev.url,
      token: ctx.dev.token,
      devMode: false,
      enableTelemetry: false,
    });
  });
  beforeEach(() => {
    ctx.dev.reset();
    ctx.dev.resumeDelivery();
    ctx.receiver.reset();
  });
  afterAll(async () => {
    await ctx.dev?.close();
    await ctx.receiver?.close();
  });
  return ctx;
}
