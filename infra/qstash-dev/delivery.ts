import http from "node:http";
import https from "node:https";

export interface OutgoingRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: Buffer;
  timeoutMs: number;
  /** Aborted when the server closes, so no delivery outlives close(). */
  signal: AbortSignal;
  /** Keeps connections to destinations open between attempts; the server destroys it on close(). */
  agent?: http.Agent;
}

export interface DeliveryResult {
  status?: number;
  headers: Record<string, string[]>;
  body: Buffer;
  /** Set when no HTTP answer arrived: timeout, connection error, or cancellation. */
  error?: string;
}

/** Responses are kept for callbacks and the DLQ; cap what we hold in memory. */
const MAX_RESPONSE_BYTES = 1024 * 1024;

/**
 * One delivery attempt. node:http rather than fetch so that the server owns its
 * sockets: attempts reuse kept-alive connections from the server's own agent
 * (a connect per attempt was the dev server's largest CPU cost under the chaos
 * suite's thousands of deliveries), the agent is destroyed on close() so nothing
 * lingers, and a slow destination still occupies only the socket of its attempt.
 * Without an agent each attempt has a fresh socket (`agent: false`).
 *
 * A kept-alive socket can be closed by the destination just as a request goes out
 * on it: wrangler dev closes one idle for 5 s, which is exactly the Worker's first
 * webhook retry delay, and the attempt failed with "socket hang up" before the
 * Worker saw it, costing the message one of its retries (seen under `npm run dev`).
 * Real QStash does not fail that way, so such an attempt is sent once more on a
 * fresh socket: only when the socket was a reused one and it was reset before any
 * answer arrived, the case Node's documentation gives for retrying (`reusedSocket`).
 */
export function deliver(request: OutgoingRequest): Promise<DeliveryResult> {
  return new Promise((resolve) => {
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      resolve({ headers: {}, body: Buffer.alloc(0), error: "invalid url" });
      return;
    }
    let settled = false;
    let req: http.ClientRequest | undefined;
    // Both only ever fire once a request exists; they act on the current one.
    const timer = setTimeout(() => {
      req?.destroy(new Error(`timed out after ${request.timeoutMs} ms`));
    }, request.timeoutMs);
    const onAbort = () => req?.destroy(new Error("cancelled: server closing"));
    const finish = (result: DeliveryResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.signal.removeEventListener("abort", onAbort);
      resolve(result);
    };
    const fail = (error: string) => finish({ headers: {}, body: Buffer.alloc(0), error });

    const client = url.protocol === "https:" ? https : http;
    const sendBody = request.body.length > 0 && request.method !== "GET" && request.method !== "HEAD";
    const pooled = url.protocol === "http:" && request.agent ? request.agent : false;

    const send = (agent: http.Agent | false) => {
      let current: http.ClientRequest;
      try {
        current = client.request(url, {
          method: request.method,
          agent,
          headers: {
            ...request.headers,
            ...(sendBody ? { "content-length": String(request.body.length) } : {}),
          },
        });
      } catch (error) {
        // e.g. a forwarded header value Node refuses to send
        fail(error instanceof Error ? error.message : String(error));
        return;
      }
      req = current;
      let answered = false;
      current.on("error", (error: NodeJS.ErrnoException) => {
        if (current !== req) return;
        if (
          !answered &&
          !settled &&
          current.reusedSocket &&
          error.code === "ECONNRESET" &&
          !request.signal.aborted
        ) {
          send(false);
          return;
        }
        fail(error.message);
      });
      current.on("response", (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size <= MAX_RESPONSE_BYTES) chunks.push(chunk);
        });
        res.on("end", () =>
          finish({ status: res.statusCode ?? 0, headers: responseHeaders(res), body: Buffer.concat(chunks) }),
        );
        res.on("error", (error) => fail(error.message));
      });
      current.end(sendBody ? request.body : undefined);
    };

    send(pooled);
    if (settled) return;
    if (request.signal.aborted) onAbort();
    else request.signal.addEventListener("abort", onAbort);
  });
}

function responseHeaders(res: http.IncomingMessage): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    (out[name] ??= []).push(raw[i + 1]!);
  }
  return out;
}
