import type { MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import type { HonoEnv } from "./env.ts";

/**
 * Operator routes take `Authorization: Bearer <ADMIN_TOKEN>`. The token is a
 * binding, known per request, so Hono's bearerAuth is built from it here (it
 * compares in constant time). Its 401 becomes the error envelope in onError.
 */
export const adminAuth: MiddlewareHandler<HonoEnv> = (c, next) =>
  bearerAuth<HonoEnv>({
    token: c.var.config.ADMIN_TOKEN,
    realm: REALM,
    // Every challenge names the realm, as the domain routes' do (RFC 6750 §3); Hono's
    // own for a malformed header or a wrong token named none.
    invalidAuthenticationHeader: {
      wwwAuthenticateHeader: `Bearer realm="${REALM}", error="invalid_request"`,
    },
    invalidToken: { wwwAuthenticateHeader: `Bearer realm="${REALM}", error="invalid_token"` },
  })(c, next);

const REALM = "edge-outbox operators";
