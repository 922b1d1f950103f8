import type { IncomingMessage, ServerResponse } from "node:http";
import type { Broker } from "./broker.ts";
import { HttpError, readBody, sendError, sendJson } from "./http-util.ts";
import { snapshot } from "./views.ts";

/** Test-only behaviour that QStash does not have: injected publish failures and latency. */
export class Faults {
  failuresLeft = 0;
  failureStatus = 500;
  latencyMs = 0;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly wakers = new Set<() => void>();

  failNextPublishes(count: number, status: number): void {
    if (!Number.isInteger(count) || count < 0)
      throw new HttpError(400, "count must be a non-negative integer");
    if (!Number.isInteger(status) || status < 400 || status > 599)
      throw new HttpError(400, "status must be 4xx or 5xx");
    this.failuresLeft = count;
    this.failureStatus = status;
  }

  setPublishLatency(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) throw new HttpError(400, "ms must be a non-negative number");
    this.latencyMs = ms;
  }

  /**
   * Runs before a publish/batch is accepted. Latency first (so a slow failing
   * publish can be simulated), then an injected failure answers instead of the
   * publish: the message is not enqueued, as when QStash itself fails.
   */
  async beforePublish(res: ServerResponse): Promise<boolean> {
    if (this.latencyMs > 0) await this.delay(this.latencyMs);
    if (this.failuresLeft > 0) {
      this.failuresLeft -= 1;
      sendError(res, this.failureStatus, `qstash-dev: injected failure (status ${this.failureStatus})`);
      return false;
    }
    return !res.destroyed;
  }

  reset(): void {
    this.failuresLeft = 0;
    this.failureStatus = 500;
    this.latencyMs = 0;
  }

  /** Ends pending latency waits at close(), so no timer outlives the server. */
  close(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const wake of this.wakers) wake();
    this.wakers.clear();
  }

  private delay(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.timers.delete(timer);
        this.wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.timers.add(timer);
      this.wakers.add(wake);
    });
  }
}

async function jsonBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const raw = await readBody(req, 64 * 1024);
  if (raw.length === 0) return {};
  try {
    const value: unknown = JSON.parse(raw.toString("utf8"));
    if (typeof value === "object" && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new HttpError(400, "admin request body must be a JSON object");
}

/**
 * /__admin/* mirrors the in-process helpers for tests running in another process:
 *   POST /__admin/fail-publishes {count, status}   POST /__admin/publish-latency {ms}
 *   POST /__admin/pause   POST /__admin/resume   POST /__admin/reset
 *   GET  /__admin/messages  → {paused, messages: [snapshot with attempts]}
 */
export async function handleAdmin(
  broker: Broker,
  faults: Faults,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<boolean> {
  const method = req.method ?? "GET";
  const route = path.slice("/__admin".length);
  const post = async (fn: (body: Record<string, unknown>) => void) => {
    if (method !== "POST") throw new HttpError(405, `method ${method} not allowed`, { allow: "POST" });
    fn(await jsonBody(req));
    sendJson(res, 200, { ok: true });
  };
  switch (route) {
    case "/fail-publishes":
      await post((b) => faults.failNextPublishes(Number(b.count ?? 1), Number(b.status ?? 500)));
      return true;
    case "/publish-latency":
      await post((b) => faults.setPublishLatency(Number(b.ms ?? 0)));
      return true;
    case "/pause":
      await post(() => broker.pauseDelivery());
      return true;
    case "/resume":
      await post(() => broker.resumeDelivery());
      return true;
    case "/reset":
      await post(() => {
        faults.reset();
        broker.reset();
      });
      return true;
    case "/messages":
      if (method !== "GET") throw new HttpError(405, `method ${method} not allowed`, { allow: "GET" });
      sendJson(res, 200, {
        paused: broker.deliveryPaused,
        messages: [...broker.store.messages.values()].map(snapshot),
      });
      return true;
    default:
      return false;
  }
}
