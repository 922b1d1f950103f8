import type { IncomingMessage, ServerResponse } from "node:http";

/** An error that maps directly onto a QStash-style JSON error answer. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

/** QStash answers errors as `{"error": "..."}`; the SDK puts that text into QstashError.message. */
export function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  headers?: Record<string, string>,
) {
  sendJson(res, status, { error: message }, headers);
}

export function sendEmpty(res: ServerResponse, status = 200): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { "content-length": 0 });
  res.end();
}

/**
 * Reads the whole request body, refusing more than `limit` bytes with a 413.
 * An oversized body is still drained (not kept) before we answer: answering
 * while the client is still writing makes fetch report a network error instead
 * of our status, and the SDK would then retry a request that can never succeed.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) tooLarge = true;
      if (!tooLarge) chunks.push(chunk);
    });
    req.on("end", () => {
      if (tooLarge) reject(new HttpError(413, `request body exceeds the maximum size of ${limit} bytes`));
      else resolve(Buffer.concat(chunks));
    });
    req.on("error", reject);
  });
}

/** Go-style canonical header name (`x-my-header` → `X-My-Header`), as QStash reports headers. */
export function canonicalHeaderName(name: string): string {
  return name
    .toLowerCase()
    .split("-")
    .map((part) => (part ? part[0]!.toUpperCase() + part.slice(1) : part))
    .join("-");
}
