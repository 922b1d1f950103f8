// A QStash-shaped endpoint that accepts every publish and does nothing else: no
// store, no deduplication, no delivery. It answers the @upstash/qstash client's
// batch and publish requests with well-formed message ids (and a DLQ listing with an
// empty queue), so a benchmark of the
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
    // The cron sweep reads the dead-letter queue every time (ADR 0026): an empty one,
    // as QStash's is when nothing failed, so a benchmark of the sweep pays what a
    // production sweep pays for it.
    // Not a publish: not counted in `requests`, and held as long as one.
    if (req.method === "GET" && path === "/v2/dlq") {
      inFlight--;
      const send = () => sendJson(res, 200, { messages: [] });
      return void (delayMs > 0 ? setTimeout(send, delayMs) : send());
    }
    if (req.method !== "POST") return fail(405, "method not allowed");
    if (failures.count > 0 && failures.skip-- <= 0) {
      failures.count--;
      return fail(failures.status, `failed on purpose (${failures.status})`);
    }
    if (path === "/v2/batch") {
      // Read only to learn how many ids to answer, and to refuse what QStash would.
      const destinations = batchDestinations(joined(chunks));
      if (!destinations) return fail(400, "batch body must be a JSON array of messages");
      stats.messages += destinations.length;
      return answer(
        res,
        200,
        destinations.map((url) => ({ messageId: `${prefix}${++sequence}`, url })),
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

/**
 * The request's chunks as one run of bytes: the only chunk itself, or the chunks
 * copied into one buffer kept for the purpose. `Buffer.concat` allocated ~150 KB per
 * request and showed in profiles at about a quarter of this endpoint's CPU. The view
 * is valid until the next call, so it is read synchronously.
 */
function joined(chunks: Buffer[]): Buffer {
  if (chunks.length === 1) return chunks[0]!;
  let length = 0;
  for (const chunk of chunks) length += chunk.length;
  if (scratch.length < length) scratch = Buffer.allocUnsafe(Math.max(length, scratch.length * 2));
  let at = 0;
  for (const chunk of chunks) at += chunk.copy(scratch, at);
  return scratch.subarray(0, length);
}
let scratch = Buffer.allocUnsafe(256 * 1024);

/**
 * The destination of each message of a batch body, in order, read from the bytes
 * without decoding or parsing the whole body; undefined when the body is not a JSON
 * array of objects. For 250 messages (a pass of the bench, ~150–210 KB) this took
 * ~0.25 ms against ~1.1–2.0 ms for `toString` and `JSON.parse` (docs/performance.md):
 * the endpoint stands in for QStash, whose own processing is not the relay's cost,
 * and that parse sat on every pass's path and took a share of the cores the relays
 * and Postgres share in the bench.
 *
 * It follows the JSON's structure (strings, nesting) and nothing else: a message
 * counts at each `{` directly inside the top-level array, and its destination is the
 * string value of its own `destination` key (empty when it has none). Numbers,
 * literals and whitespace are skipped unchecked, so a malformed value inside a
 * message passes; a body with unbalanced nesting or an unterminated string does not.
 */
export function batchDestinations(bytes: Buffer): string[] | undefined {
  let i = skipSpace(bytes, 0);
  if (bytes[i] !== OPEN_BRACKET) return undefined;
  i++;
  const destinations: string[] = [];
  let depth = 1;
  // Inside a message (depth 2): whether the last string was its `destination` key,
  // and whether the next string is that key's value.
  let key = false;
  let value = false;
  while (i < bytes.length) {
    const c = bytes[i]!;
    // Directly inside the array only messages, commas and whitespace may stand.
    if (depth === 1 && c !== OPEN_BRACE && c !== CLOSE_BRACKET && c !== COMMA && !isSpace(c))
      return undefined;
    if (c === QUOTE) {
      const end = closingQuote(bytes, i);
      if (end === -1) return undefined;
      if (depth === 2) {
        if (value) {
          destinations[destinations.length - 1] = stringAt(bytes, i, end);
          value = false;
        } else {
          key = end - i - 1 === DESTINATION.length && bytes.toString("latin1", i + 1, end) === DESTINATION;
        }
      }
      i = end + 1;
      continue;
    }
    if (c === COLON) {
      value = depth === 2 && key;
      key = false;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      depth++;
      if (depth === 2) {
        // An element of the top-level array: a message, which must be an object.
        if (c !== OPEN_BRACE) return undefined;
        destinations.push("");
      }
      value = false;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
      if (depth < 0) return undefined;
      if (depth === 0) return skipSpace(bytes, i + 1) === bytes.length ? destinations : undefined;
    } else if (c === COMMA) {
      key = false;
      value = false;
    }
    i++;
  }
  return undefined;
}

/** The index of the `"` that ends the string opening at `open`, or -1. */
function closingQuote(bytes: Buffer, open: number): number {
  let end = bytes.indexOf(QUOTE, open + 1);
  while (end !== -1) {
    let backslashes = 0;
    while (bytes[end - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return end;
    end = bytes.indexOf(QUOTE, end + 1);
  }
  return -1;
}

/** The JSON string between the quotes at `open` and `close`, unescaped. */
function stringAt(bytes: Buffer, open: number, close: number): string {
  const raw = bytes.toString("utf8", open + 1, close);
  return raw.includes("\\") ? (JSON.parse(`"${raw}"`) as string) : raw;
}

function skipSpace(bytes: Buffer, from: number): number {
  let i = from;
  while (i < bytes.length && isSpace(bytes[i]!)) i++;
  return i;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

const DESTINATION = "destination";
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
