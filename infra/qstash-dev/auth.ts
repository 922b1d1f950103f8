import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";

/**
 * QStash accepts the token as `Authorization: Bearer <token>` or as the
 * `qstash_token` query parameter (the OpenAPI spec's bearerAuthQuery).
 */
export function isAuthorized(req: IncomingMessage, url: URL, token: string): boolean {
  const header = req.headers.authorization;
  const bearer = header?.startsWith("Bearer ") ? header.slice("Bearer ".length).trim() : undefined;
  const presented = bearer ?? url.searchParams.get("qstash_token") ?? undefined;
  return presented !== undefined && safeEqual(presented, token);
}

function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  // timingSafeEqual throws on unequal lengths; the length itself is not the secret.
  return left.length === right.length && timingSafeEqual(left, right);
}
