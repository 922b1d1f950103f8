import type { MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import type { HonoEnv } from "./env.ts";

/**
 * Operator routes take `Authorization: Bearer <ADMIN_TOKEN>`. The token is a
 * binding, known per request, so Hono's bearerAuth is built from it here (it
 * compares in constant time). Its 401 becomes the error envelope in onError.
 */
export const adminAuth: MiddlewareHandler<HonoEnv> = (c, next) =>
  bearerAuth<HonoEnv>({ token: c.var.config.ADMIN_TOKEN, realm: "edge-outbox operators" })(c, next);
