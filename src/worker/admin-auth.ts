import type { MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { timingSafeEqual } from "hono/utils/buffer";
import { attemptLogin, clientAddress, localLockoutHint, retryAfterSeconds } from "./dashboard/lockout.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";
import { isBearer } from "./tenant-auth.ts";

/**
 * Operator routes take `Authorization: Bearer <ADMIN_TOKEN>`. The token is a
 * binding, known per request, so Hono's bearerAuth is built from it here; its 401
 * becomes the error envelope in onError.
 *
 * Every token offered is a login attempt against the dashboard's lock-out, in the
 * same bucket per address: the dashboard's password is this token, so guesses here
 * without a limit made that lock-out pointless (200 wrong tokens in a row were all
 * answered 401, the right one then 200). A locked address is refused with 429 and
 * its token not compared, so a guess during the lock learns nothing.
 */
export const adminAuth: MiddlewareHandler<HonoEnv> = (c, next) => {
  // Another scheme's credentials (Basic, a bare token) are no bearer token: 401 with a
  // plain challenge (RFC 6750 §3.1), not Hono's 400 invalid_request, which is for a
  // Bearer header that is malformed. Not a guess at the token, so not a login attempt.
  const header = c.req.header("authorization");
  if (header !== undefined && !isBearer(header)) {
    c.header("WWW-Authenticate", `Bearer realm="${REALM}"`);
    throw new ApiError(
      "UNAUTHORIZED",
      "the operator token is required: Authorization: Bearer <ADMIN_TOKEN> (this header's scheme is not Bearer)",
    );
  }
  return bearerAuth<HonoEnv>({
    verifyToken: async (token) => {
      const outcome = await attemptLogin(
        c.var.pool,
        clientAddress(c.req.header.bind(c.req), c.var.config.PUBLIC_URL),
        () =>
          // Hashes both sides before comparing, so neither content nor length leaks through timing.
          timingSafeEqual(token, c.var.config.ADMIN_TOKEN),
      );
      if (outcome.ok) return true;
      if (outcome.lockedUntil) {
        c.header("Retry-After", String(retryAfterSeconds(outcome.lockedUntil)));
        throw new ApiError(
          "TOO_MANY_REQUESTS",
          `too many wrong operator tokens from this address (here or at the dashboard's login); ` +
            `refused until ${outcome.lockedUntil.toISOString()}.${localLockoutHint(c.var.config.PUBLIC_URL)}`,
        );
      }
      return false;
    },
    realm: REALM,
    // Every challenge names the realm, as the domain routes' do (RFC 6750 §3); Hono's
    // own for a malformed header or a wrong token named none.
    invalidAuthenticationHeader: {
      wwwAuthenticateHeader: `Bearer realm="${REALM}", error="invalid_request"`,
    },
    invalidToken: { wwwAuthenticateHeader: `Bearer realm="${REALM}", error="invalid_token"` },
  })(c, next);
};

const REALM = "edge-outbox operators";
