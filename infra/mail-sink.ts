// A local stand-in for the mail API and for webhook endpoints: it accepts any
// POST, logs one line per request, and keeps what it received so tests and people
// can look (in process, or GET /__received). Tests (respondWith) and people (PUT
// /__respond) can change its answer mid-run to exercise retries, the way a flaky
// real endpoint would.
import http from "node:http";

export interface ReceivedRequest {
  /** 1-based arrival order. */
  n: number;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** The body parsed, when it was JSON. */
  json?: unknown;
  /** The status the sink answered with. */
  status: number;
  /** How long the sink held its answer, when a rule said to (PUT /__respond's `delayMs`). */
  delayMs?: number;
  /** Set when the sender closed the connection before a held answer was sent: it timed out. */
  abandonedAfterMs?: number;
  receivedAt: string;
}

export interface SinkResponse {
  status: number;
  body?: unknown;
  /** Hold the answer this long: a slow receiver, or one a sender's timeout gives up on. */
  delayMs?: number;
}

/** The longest PUT /__respond may hold an answer: past every sender's timeout here (15 s for webhooks). */
export const MAX_SINK_DELAY_MS = 120_000;

export interface MailSink {
  url: string;
  port: number;
  received(filter?: { path?: string }): ReceivedRequest[];
  /** Resolves with the first request (past or future) that matches; rejects after timeoutMs. */
  waitFor(match: (r: ReceivedRequest) => boolean, timeoutMs?: number): Promise<ReceivedRequest>;
  /** Answer following POSTs with this (e.g. 503 to make a sender retry); `null` restores the default. */
  respondWith(response: SinkResponse | ((r: ReceivedRequest) => SinkResponse) | null): void;
  clear(): void;
  close(): Promise<void>;
}

export interface MailSinkOptions {
  port?: number;
  log?: (line: string) => void;
  /** Keep only the newest this many requests (`received()`, GET /__received); all when unset. */
  keepReceived?: number;
}

const MAX_BODY = 1024 * 1024;

export async function startMailSink(options: MailSinkOptions = {}): Promise<MailSink> {
  const log = options.log ?? ((line: string) => console.log(line));
  let store: ReceivedRequest[] = [];
  let count = 0;
  // undefined from the override: the normal answer for that request.
  let override: ((r: ReceivedRequest) => SinkResponse | undefined) | null = null;
  // PUT /__respond's answers, by path; "" for every path without one of its own.
  const rules = new Map<string, SinkResponse>();
  const waiters = new Set<{
    match: (r: ReceivedRequest) => boolean;
    resolve: (r: ReceivedRequest) => void;
  }>();
  // Answers being held (delayMs), so close() does not wait for them.
  const held = new Set<NodeJS.Timeout>();
  let closing = false;

  const server = http.createServer(async (req, res) => {
    const path = req.url ?? "/";
    if (req.method === "GET" && path.startsWith("/__received")) {
      // `?path=/webhooks` narrows the list to what one receiver got.
      const only = new URL(path, "http://sink").searchParams.get("path");
      return send(res, 200, only === null ? store : store.filter((r) => r.path === only));
    }
    if (req.method === "DELETE" && path === "/__received") {
      store = [];
      return send(res, 204);
    }
    if (path.split("?")[0] === "/__respond" && (req.method === "PUT" || req.method === "DELETE")) {
      return setAnswer(req, res);
    }
    if (req.method !== "POST") {
      log(`sink ${req.method} ${path} 405`);
      return send(res, 405, { error: "the sink accepts POST (and GET /__received, PUT /__respond)" });
    }
    let body: string;
    try {
      body = await readBody(req);
    } catch {
      log(`sink POST ${path} 413`);
      return send(res, 413, { error: `body over ${MAX_BODY} bytes` });
    }
    const n = ++count;
    const entry: ReceivedRequest = {
      n,
      method: req.method,
      path,
      headers: Object.fromEntries(
        Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]),
      ),
      body,
      json: parseJson(body),
      status: 200,
      receivedAt: new Date().toISOString(),
    };
    // The default answer looks like a mail API's: an id for the accepted message.
    const answer = override?.(entry) ??
      rules.get(path) ??
      rules.get("") ?? { status: 200, body: { id: `sink-${n}` } };
    entry.status = answer.status;
    if (answer.delayMs) entry.delayMs = answer.delayMs;
    store.push(entry);
    const keep = options.keepReceived ?? Infinity;
    if (store.length > keep) store.splice(0, store.length - keep);
    const holding = answer.delayMs ? ` (answering in ${answer.delayMs} ms)` : "";
    log(`sink POST ${path} ${answer.status}${holding} ${Buffer.byteLength(body)}B${describe(entry)}`);
    for (const waiter of waiters) {
      if (waiter.match(entry)) {
        waiters.delete(waiter);
        waiter.resolve(entry);
      }
    }
    if (!answer.delayMs) return send(res, answer.status, answer.body);
    hold(entry, res, answer);
  });

  /**
   * Sends `answer` after its delay, unless the sender closed the connection first
   * (its timeout): then the entry and one log line say after how long it gave up.
   */
  function hold(entry: ReceivedRequest, res: http.ServerResponse, answer: SinkResponse) {
    const since = Date.now();
    const timer = setTimeout(() => {
      held.delete(timer);
      res.off("close", gaveUp);
      send(res, answer.status, answer.body);
    }, answer.delayMs);
    held.add(timer);
    const gaveUp = () => {
      clearTimeout(timer);
      held.delete(timer);
      // The sink's own close() dropped the connection: nobody gave up.
      if (closing) return;
      entry.abandonedAfterMs = Date.now() - since;
      log(
        `sink POST ${entry.path} #${entry.n}: the sender gave up after ${entry.abandonedAfterMs} ms, ` +
          `before the ${answer.delayMs} ms answer`,
      );
    };
    res.once("close", gaveUp);
  }

  /**
   * `PUT /__respond {"status": 503, "delayMs"?: 20000, "path"?: "/webhooks", "body"?: …}`:
   * answer the following POSTs (to `path` only, when given) with that, after
   * `delayMs` when given, so a person can make the mail API or a webhook receiver
   * fail, or be slower than its sender's timeout, from a terminal and watch retries,
   * dead letters and alerts. Each path keeps its own answer (a second PUT for another path
   * adds to the first; one without a path answers every other path), and the answer
   * lists every rule in force. `DELETE /__respond` restores the normal answer
   * everywhere, `DELETE /__respond?path=/webhooks` for that path only.
   */
  async function setAnswer(req: http.IncomingMessage, res: http.ServerResponse) {
    if (req.method === "DELETE") {
      const only = new URL(req.url ?? "/", "http://sink").searchParams.get("path");
      if (only === null) {
        override = null;
        rules.clear();
      } else rules.delete(only);
      log(`sink answers normally again${only === null ? "" : ` to POSTs to ${only}`}${describeRules()}`);
      return send(res, 204);
    }
    let raw: string;
    try {
      raw = await readBody(req);
    } catch {
      return send(res, 413, { error: `body over ${MAX_BODY} bytes` });
    }
    const asked = parseJson(raw) as
      { status?: unknown; delayMs?: unknown; path?: unknown; body?: unknown } | undefined;
    const delayMs = asked?.delayMs;
    if (
      delayMs !== undefined &&
      (typeof delayMs !== "number" ||
        !Number.isInteger(delayMs) ||
        delayMs < 0 ||
        delayMs > MAX_SINK_DELAY_MS)
    ) {
      return send(res, 400, {
        error: `delayMs must be a whole number of milliseconds, 0–${MAX_SINK_DELAY_MS}`,
      });
    }
    // A delay alone is a slow receiver that still says yes.
    const status = asked?.status ?? (delayMs === undefined ? undefined : 200);
    if (typeof status !== "number" || !Number.isInteger(status) || status < 200 || status > 599) {
      return send(res, 400, {
        error: `PUT /__respond takes {"status": 200–599, "delayMs"?: 0–${MAX_SINK_DELAY_MS}, "path"?: "/…", "body"?: any} (status or delayMs at least)`,
      });
    }
    const only = asked?.path;
    if (only !== undefined && (typeof only !== "string" || !only.startsWith("/"))) {
      return send(res, 400, { error: "path must start with /" });
    }
    const answer: SinkResponse = { status, body: asked?.body, ...(delayMs ? { delayMs } : {}) };
    rules.set(only ?? "", answer);
    log(
      `sink answers ${describeAnswer(answer)} to POSTs${only === undefined ? "" : ` to ${only}`} until DELETE /__respond`,
    );
    send(res, 200, {
      status,
      ...(answer.delayMs ? { delayMs: answer.delayMs } : {}),
      ...(only === undefined ? {} : { path: only }),
      rules: [...rules].map(([path, a]) => ({
        ...(path ? { path } : {}),
        status: a.status,
        ...(a.delayMs ? { delayMs: a.delayMs } : {}),
      })),
    });
  }

  /** The rules still in force, for the log line after a DELETE. */
  function describeRules(): string {
    if (rules.size === 0) return "";
    const each = [...rules].map(
      ([path, a]) => `${describeAnswer(a)}${path ? ` to ${path}` : " to the rest"}`,
    );
    return `; still answering ${each.join(", ")}`;
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  if (typeof address !== "object" || address === null) throw new Error("mail-sink: no listening address");
  const url = `http://127.0.0.1:${address.port}`;

  return {
    url,
    port: address.port,
    received: (filter) => store.filter((r) => filter?.path === undefined || r.path === filter.path),
    waitFor: (match, timeoutMs = 5_000) => {
      const seen = store.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = {
          match,
          resolve: (r: ReceivedRequest) => {
            clearTimeout(timer);
            resolve(r);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(
            new Error(`mail-sink: no matching request within ${timeoutMs} ms (${store.length} received)`),
          );
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
    respondWith: (response) => {
      override = response === null ? null : typeof response === "function" ? response : () => response;
    },
    clear: () => {
      store = [];
    },
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        for (const timer of held) clearTimeout(timer);
        held.clear();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function describeAnswer(a: SinkResponse): string {
  return a.delayMs ? `${a.status} after ${a.delayMs} ms` : String(a.status);
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        reject(new Error("too large"));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function parseJson(body: string): unknown {
  try {
    return body ? JSON.parse(body) : undefined;
  } catch {
    return undefined;
  }
}

// A hint of what arrived, so the log line alone tells a mail from a webhook.
function describe(r: ReceivedRequest): string {
  const json = r.json as Record<string, unknown> | undefined;
  if (r.headers["webhook-id"]) {
    // The three Standard Webhooks headers, so a person can check a delivery by eye;
    // a rotation shows as two v1 signatures.
    const signatures = (r.headers["webhook-signature"] ?? "").split(" ").filter(Boolean);
    const type = json && typeof json.type === "string" ? ` ${json.type}` : "";
    return (
      ` webhook${type} webhook-id=${r.headers["webhook-id"]}` +
      ` webhook-timestamp=${r.headers["webhook-timestamp"] ?? "-"}` +
      ` webhook-signature=${signatures.length ? signatures.map((sig) => `${sig.slice(0, 12)}…`).join(" ") : "-"}`
    );
  }
  if (json && typeof json.to === "string")
    return ` mail to ${json.to}${json.subject ? `: ${json.subject}` : ""}`;
  return "";
}

function send(res: http.ServerResponse, status: number, body?: unknown): void {
  if (body === undefined || status === 204) {
    res.writeHead(status).end();
    return;
  }
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
