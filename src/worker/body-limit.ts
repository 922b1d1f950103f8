import type { MiddlewareHandler } from "hono";
import { FAILURE_CALLBACK_PATH } from "../outbox/index.ts";
import { MAX_IMPORT } from "../domain/notes/schemas.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";

/** The default cap on a request body (`MAX_BODY_BYTES` changes it): QStash's own message limit. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

// 2,000 ordinary notes fit easily in 8 MB.
const MAX_IMPORT_BYTES = 8 * 1024 * 1024;

/**
 * How much more of a chunked body, past its cap, is read and dropped before the 413.
 * A response sent while the request body is still arriving breaks the connection it
 * arrives on in workerd: `wrangler dev`'s proxy then fails the next request, whoever
 * sends it, with "503 Your worker restarted mid-request", unrun (workerd#1741).
 * Cancelling the stream does not help, as the bytes are still on their way; reading to
 * the end does. (wrangler dev drains a body nobody touched, not one read partway.)
 * Nothing past the cap is kept; a body larger still is cancelled, and not waited for.
 */
export const MAX_DISCARD_BYTES = 16 * 1024 * 1024;

/**
 * Caps every request body before anything reads it, so a 5 MB note is refused
 * with 413 instead of being buffered and parsed for its 400. A declared
 * Content-Length over the cap is refused without reading a byte; a chunked body
 * is buffered only up to the cap. Two routes carry more by design: a bulk import,
 * and QStash's failure callback, which wraps a whole job (and the answer it got)
 * in base64.
 */
export const limitBodies: MiddlewareHandler<HonoEnv> = async (c, next) => {
  const raw = c.req.raw;
  if (!raw.body) return next();
  const max = maxBodyBytes(c.req.path, c.var.config.MAX_BODY_BYTES);
  const tooLarge = () => {
    const hint = c.req.path === "/notes/import" ? `; split it (up to ${MAX_IMPORT} notes each)` : "";
    return new ApiError("PAYLOAD_TOO_LARGE", `the request body may be at most ${max} bytes${hint}`);
  };
  if (raw.headers.has("content-length") && !raw.headers.has("transfer-encoding")) {
    if (Number.parseInt(raw.headers.get("content-length") ?? "0", 10) > max) throw tooLarge();
    return next();
  }
  const reader = raw.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await discard(reader, MAX_DISCARD_BYTES);
      throw tooLarge();
    }
    chunks.push(value);
  }
  const body = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  c.req.raw = new Request(raw, { body });
  return next();
};

/** Reads the rest of a body and drops it, up to `limit` bytes; past that, cancels it. */
async function discard(reader: ReadableStreamDefaultReader<Uint8Array>, limit: number): Promise<void> {
  try {
    for (let read = 0; read <= limit;) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // The client went away: there is nothing left to drain, nor anyone to answer.
  }
}

export function maxBodyBytes(path: string, configured: number): number {
  if (path === "/notes/import") return Math.max(MAX_IMPORT_BYTES, configured);
  if (path === FAILURE_CALLBACK_PATH) return 3 * configured;
  return configured;
}
