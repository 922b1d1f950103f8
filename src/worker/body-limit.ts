import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { FAILURE_CALLBACK_PATH } from "../outbox/index.ts";
import { MAX_IMPORT } from "../domain/notes/schemas.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";

/** The default cap on a request body (`MAX_BODY_BYTES` changes it): QStash's own message limit. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

// 2,000 ordinary notes fit easily in 8 MB.
const MAX_IMPORT_BYTES = 8 * 1024 * 1024;

/**
 * Caps every request body before anything reads it, so a 5 MB note is refused
 * with 413 instead of being buffered and parsed for its 400. A declared
 * Content-Length over the cap is refused without reading a byte; a chunked body
 * is read only up to the cap. Two routes carry more by design: a bulk import,
 * and QStash's failure callback, which wraps a whole job (and the answer it got)
 * in base64.
 */
export const limitBodies: MiddlewareHandler<HonoEnv> = (c, next) => {
  const max = maxBodyBytes(c.req.path, c.var.config.MAX_BODY_BYTES);
  return bodyLimit({
    maxSize: max,
    onError: () => {
      const hint = c.req.path === "/notes/import" ? `; split it (up to ${MAX_IMPORT} notes each)` : "";
      throw new ApiError("PAYLOAD_TOO_LARGE", `the request body may be at most ${max} bytes${hint}`);
    },
  })(c, next);
};

export function maxBodyBytes(path: string, configured: number): number {
  if (path === "/notes/import") return Math.max(MAX_IMPORT_BYTES, configured);
  if (path === FAILURE_CALLBACK_PATH) return 3 * configured;
  return configured;
}
