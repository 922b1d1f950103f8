// A QStash-shaped endpoint that accepts every publish and does nothing else: no
// store, no deduplication, no delivery. It answers the @upstash/qstash client's
// batch and publish requests with well-formed message ids, so a benchmark of the
// relay through the real SDK measures the relay and the SDK, not a stand-in's CPU
// (the dev server in infra/qstash-dev keeps every message and was the limit).
// An optional delay per request stands in for the distance to QStash.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { randomBytes } from "node:crypto";
import { sendError, sendJson } from "./qstash-dev/http-util.ts";

export interface AcceptOnlyQStashOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Milliseconds each request is held after its body arrived: the round trip to QStash. */
  delayMs?: number;
  token?: string;
}

export interface AcceptOnlyStats {
  /** Requests answered (batch and single publishes, failures included). */
  requests: number;
  /** Messages accepted. */
  messages: number;
  /** Most requests in progress at once: concurrent chunks show up here. */
  maxInFlight: number;
}

export interface AcceptOnlyQStash {
  url: string;
  token: string;
  stats(): AcceptOnlyStats;
  /**
   * After letting `skip` requests through, answers the next `count` with `status`
   * at once (no delay), e.g. 503 for an outage.
   */
  failNext(count: number, status: number, skip?: number): void;
  reset(): void;
  close(): Promise<void>;
}

export async function startAcceptOnlyQStash(
  options: AcceptOnlyQStashOptions = {},
): Promise<AcceptOnlyQStash> {
  const token = options.token ?? "accept-only-token";
  const delayMs = options.delayMs ?? 0;
  // Unique per process and cheap per message: a counter after a random prefix,
  // shaped like QStash's `msg_<base64url>`.
  const prefix = `msg_${randomBytes(6).toString("base64url")}`;
  let sequence = 0;
  const stats: AcceptOnlyStats = { requests: 0, messages: 0, maxInFlight: 0 };
  let inFlight = 0;
  let failures = { skip: 0, count: 0, status: 0 };

  const answer = (res: ServerResponse, status: number, body: unknown) => {
    const send = () => {
      inFlight--;
      stats.requests++;
      sendJson(res, status, body);
    };
    if (delayMs > 0) setTimeout(send, delayMs);
    else send();
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, inFlight);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = new URL(req.url ?? "/", "http://qstash").pathname;
    const fail = (status: number, message: string) => {
      inFlight--;
      stats.requests++;
      sendError(res, status, message);
    };
    if (req.headers.authorization !== `Bearer ${token}`) return fail(401, "invalid token");
    if (req.method !== "POST") return fail(405, "method not allowed");
    if (failures.count > 0 && failures.skip-- <= 0) {
      failures.count--;
      return fail(failures.status, `failed on purpose (${failures.status})`);
    }
    if (path === "/v2/batch") {
      // Parsed only to learn how many ids to answer, and to refuse what QStash would.
      let messages: unknown;
      try {
        messages = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return fail(400, "batch body must be a JSON array of messages");
      }
      if (!Array.isArray(messages)) return fail(400, "batch body must be a JSON array of messages");
      stats.messages += messages.length;
      return answer(
        res,
        200,
        messages.map((m: { destination?: unknown }) => ({
          messageId: `${prefix}${++sequence}`,
          url: String(m?.destination ?? ""),
        })),
      );
    }
    if (path.startsWith("/v2/publish/")) {
      stats.messages++;
      return answer(res, 200, { messageId: `${prefix}${++sequence}` });
    }
    return fail(404, `not found: ${path}`);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      inFlight--;
      sendError(res, 500, String(error));
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("accept-only QStash: no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    token,
    stats: () => ({ ...stats }),
    failNext(count, status, skip = 0) {
      failures = { skip, count, status };
    },
    reset() {
      Object.assign(stats, { requests: 0, messages: 0, maxInFlight: 0 });
      failures = { skip: 0, count: 0, status: 0 };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
