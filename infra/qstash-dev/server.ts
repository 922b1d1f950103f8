import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { Faults, handleAdmin } from "./admin.ts";
import { handleApi } from "./api.ts";
import { isAuthorized } from "./auth.ts";
import { Broker } from "./broker.ts";
import { HttpError, sendError } from "./http-util.ts";
import { generateSigningKey } from "./signing.ts";
import { isSettled } from "./types.ts";
import { snapshot, type MessageSnapshot } from "./views.ts";

export type { MessageSnapshot } from "./views.ts";
export type { Attempt, MessageState } from "./types.ts";
export { isSettled } from "./types.ts";
export { signJwt } from "./signing.ts";

/**
 * QSTASH_DEV_TIME_SCALE's value as `timeScale`: a non-negative number, 1 when unset
 * or empty. Throws, naming the variable, for anything else; `npm run qstash:dev`
 * and `npm run dev` read it alike.
 */
export function timeScaleFrom(raw: string | undefined): number {
  if (raw === undefined || raw === "") return 1;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) {
    throw new RangeError(
      `QSTASH_DEV_TIME_SCALE must be a non-negative number (e.g. 0.01), got ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

/** `restored` as the dev server's start-up line says it. */
export function restoredText({ waiting, deadLetters }: { waiting: number; deadLetters: number }): string {
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  return `${plural(waiting, "message")} waiting and ${plural(deadLetters, "dead letter")} from before`;
}

export interface QStashDevOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  host?: string;
  token?: string;
  currentSigningKey?: string;
  nextSigningKey?: string;
  /** Key rotation: sign deliveries with the next key instead of the current one. */
  signWithNextKey?: boolean;
  /** Multiplies relative delays (Upstash-Delay, retry backoff, Retry-After); 0.001 turns 12 s into 12 ms. */
  timeScale?: number;
  dedupWindowMs?: number;
  /** Per-message body limit; QStash's is 1 MB. */
  maxBodyBytes?: number;
  /** Retries when Upstash-Retries is absent; the OpenAPI spec documents 3. */
  defaultRetries?: number;
  /** Attempt timeout when Upstash-Timeout is absent (not time-scaled). */
  defaultTimeoutMs?: number;
  log?: (line: string) => void;
  /**
   * Keep the queue in this file (a journal) across restarts: messages not yet
   * delivered, dead letters and deduplication keys come back on the next start,
   * as QStash keeps them (ADR 0029). Unset, the queue lives in memory only.
   */
  stateFile?: string;
  /** Start with delivery paused until `resumeDelivery()`, e.g. until restored messages' destination is up. */
  startPaused?: boolean;
  /**
   * How many settled messages (delivered, dead-lettered, cancelled) `messages()` and
   * GET /v2/messages keep; older ones are forgotten. Unlimited when unset, for tests;
   * a long-running server should set it, or its memory grows with every message.
   */
  keepSettled?: number;
}

export interface QStashDev {
  url: string;
  port: number;
  token: string;
  currentSigningKey: string;
  nextSigningKey: string;
  /** What `stateFile` held at start: messages waiting for an attempt, and dead letters. */
  restored: { waiting: number; deadLetters: number };
  close(): Promise<void>;
  failNextPublishes(count: number, status: number): void;
  setPublishLatency(ms: number): void;
  pauseDelivery(): void;
  resumeDelivery(): void;
  /**
   * Pauses delivery and waits (at most `timeoutMs`) for the attempts already under
   * way to be answered; resolves with how many still were. Before the destination
   * stops: an attempt it refuses or cuts counts as a failure and costs a retry.
   */
  quiesce(timeoutMs: number): Promise<number>;
  /** Sign with the next key (true) or the current one (false) from now on. */
  setSignWithNextKey(value: boolean): void;
  /** Every message (publishes and callbacks) with its state and attempts. */
  messages(): MessageSnapshot[];
  message(messageId: string): MessageSnapshot | undefined;
  /** Resolves with the predicate's first truthy value; re-evaluated on every state change. */
  waitFor<T>(
    predicate: (messages: MessageSnapshot[]) => T | undefined | false | null,
    timeoutMs?: number,
  ): Promise<T>;
  /** Waits until the message reaches DELIVERED, ERROR (DLQ) or CANCELLED. */
  waitForSettled(messageId: string, timeoutMs?: number): Promise<MessageSnapshot>;
  reset(): void;
}

const MB = 1024 * 1024;

/** Settled messages a long-running server (`npm run qstash:dev`, `npm run dev`) keeps in memory. */
export const DEV_KEEP_SETTLED = 5_000;

export async function startQStashDev(options: QStashDevOptions = {}): Promise<QStashDev> {
  const token = options.token ?? `qstash_dev_${randomBytes(24).toString("base64url")}`;
  const currentSigningKey = options.currentSigningKey ?? generateSigningKey();
  const nextSigningKey = options.nextSigningKey ?? generateSigningKey();
  let signWithNextKey = options.signWithNextKey ?? false;
  const log = options.log ?? (() => {});
  const maxBodyBytes = options.maxBodyBytes ?? MB;

  const broker = new Broker({
    timeScale: options.timeScale ?? 1,
    dedupWindowMs: options.dedupWindowMs ?? 10 * 60_000,
    signingKey: () => (signWithNextKey ? nextSigningKey : currentSigningKey),
    log,
    stateFile: options.stateFile,
    startPaused: options.startPaused,
    keepSettled: options.keepSettled,
  });
  const faults = new Faults();
  const apiContext = {
    broker,
    defaults: {
      retries: options.defaultRetries ?? 3,
      // The retry docs: requests not answered within 15 minutes (free plan) count as failed.
      timeoutMs: options.defaultTimeoutMs ?? 15 * 60_000,
      maxBodyBytes,
    },
    // Guess: QStash caps a batch by message count, not bytes; this only bounds memory.
    maxBatchBytes: Math.max(10 * MB, maxBodyBytes * 10),
    beforePublish: (res: ServerResponse) => faults.beforePublish(res),
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const rawPath = req.url ?? "/";
    let url: URL;
    try {
      url = new URL(rawPath, "http://qstash-dev.local");
    } catch {
      throw new HttpError(400, "malformed request target");
    }
    if (!url.pathname.startsWith("/v2/") && !url.pathname.startsWith("/__admin/")) {
      throw new HttpError(404, `route ${req.method ?? "GET"} ${url.pathname} not found`);
    }
    if (!isAuthorized(req, url, token)) throw new HttpError(401, "unauthorized: missing or invalid token");
    const handled = url.pathname.startsWith("/__admin/")
      ? await handleAdmin(broker, faults, req, res, url.pathname, (value) => (signWithNextKey = value))
      : await handleApi(apiContext, req, res, url, rawPath);
    if (!handled) throw new HttpError(404, `route ${req.method ?? "GET"} ${url.pathname} not found`);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(async (error: unknown) => {
      const httpError =
        error instanceof HttpError
          ? error
          : new HttpError(500, `internal error: ${(error as Error)?.message}`);
      if (!(error instanceof HttpError))
        log(`[qstash-dev] internal error: ${(error as Error)?.stack ?? error}`);
      await drainRequest(req);
      sendError(res, httpError.status, httpError.message, httpError.headers);
    });
  });
  // A malformed request line must not crash the process; answer 400 and move on.
  server.on("clientError", (_error, socket) => {
    if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  }).catch(async (error: unknown) => {
    // A port in use: the broker may already be delivering what it restored, and holds its file.
    await broker.close();
    throw error;
  });
  const address = server.address() as AddressInfo;
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;

  const snapshots = () => [...broker.store.messages.values()].map(snapshot);
  let closed: Promise<void> | undefined;

  return {
    url,
    port: address.port,
    token,
    currentSigningKey,
    nextSigningKey,
    restored: { ...broker.restored },
    close() {
      closed ??= (async () => {
        faults.close();
        await broker.close();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      })();
      return closed;
    },
    failNextPublishes: (count, status) => faults.failNextPublishes(count, status),
    setPublishLatency: (ms) => faults.setPublishLatency(ms),
    pauseDelivery: () => broker.pauseDelivery(),
    resumeDelivery: () => broker.resumeDelivery(),
    async quiesce(timeoutMs) {
      broker.pauseDelivery();
      const active = () => [...broker.store.messages.values()].filter((m) => m.state === "ACTIVE").length;
      // Past the wait, the count left is the answer, not an error.
      await broker.store.waitFor(() => active() === 0, timeoutMs).catch(() => undefined);
      return active();
    },
    setSignWithNextKey(value) {
      signWithNextKey = value;
    },
    messages: snapshots,
    message(messageId) {
      const message = broker.store.get(messageId);
      return message ? snapshot(message) : undefined;
    },
    waitFor(predicate, timeoutMs = 10_000) {
      return broker.store.waitFor(
        () => predicate(snapshots()),
        timeoutMs,
        () => summarize(snapshots()),
      );
    },
    waitForSettled(messageId, timeoutMs = 10_000) {
      return broker.store.waitFor(
        () => {
          const message = broker.store.get(messageId);
          return message && isSettled(message.state) ? snapshot(message) : undefined;
        },
        timeoutMs,
        () => summarize(snapshots()),
      );
    },
    reset() {
      faults.reset();
      broker.reset();
    },
  };
}

/** For timeout errors: counts per state, then the first few unsettled messages. */
function summarize(messages: MessageSnapshot[]): string {
  const counts = new Map<string, number>();
  for (const m of messages) counts.set(m.state, (counts.get(m.state) ?? 0) + 1);
  const unsettled = messages
    .filter((m) => !isSettled(m.state))
    .slice(0, 10)
    .map((m) => `${m.messageId} ${m.kind} ${m.state} ${m.url} attempts=${m.attempts.length}`);
  return `${[...counts].map(([state, n]) => `${state}=${n}`).join(" ") || "no messages"}${
    unsettled.length ? `; unsettled: ${unsettled.join("; ")}` : ""
  }`;
}

/** Reads and discards whatever is left of a request so an early error answer reaches the client. */
function drainRequest(req: IncomingMessage): Promise<void> {
  if (req.complete || req.readableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    req.on("end", resolve);
    req.on("error", () => resolve());
    req.on("close", () => resolve());
    req.resume();
  });
}
