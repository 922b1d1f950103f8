import type { MiddlewareHandler } from "hono";
import { csrf } from "hono/csrf";
import { ApiError } from "../errors.ts";
import { NONCE, secureHeaders } from "hono/secure-headers";
import type { HonoEnv } from "../env.ts";

/**
 * Headers for every dashboard answer. The policy allows nothing by default:
 * styles only from our own stylesheet, scripts only with this response's nonce
 * (one small enhancement script, the pages work without it), forms only to
 * ourselves, and no framing at all (clickjacking a requeue button).
 */
export const dashboardHeaders: MiddlewareHandler<HonoEnv> = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: [NONCE],
    styleSrc: ["'self'"],
    imgSrc: ["'self'"],
    formAction: ["'self'"],
    frameAncestors: ["'none'"],
    baseUri: ["'none'"],
  },
  xFrameOptions: "DENY",
  referrerPolicy: "same-origin",
});

/**
 * Cross-site posts are refused twice over: the session cookie is SameSite=Strict,
 * so a post from another site carries no session, and Hono's csrf middleware
 * refuses a form post whose Origin (or Sec-Fetch-Site) is not this site, which
 * also covers the login form (login CSRF).
 */
export const sameOriginForms: MiddlewareHandler<HonoEnv> = async (c, next) => {
  // Hono's check looks only at the bodies a cross-site <form> can send; a post of
  // any other type (JSON, `text/plainx`) went through unchecked, and its action ran.
  // The dashboard's forms send only these two, so nothing else is taken at all.
  const write = !/^(GET|HEAD|OPTIONS)$/.test(c.req.method);
  const type = c.req.header("content-type") ?? "";
  if (write && !/^(application\/x-www-form-urlencoded|multipart\/form-data)\s*(;|$)/i.test(type)) {
    throw new ApiError("UNSUPPORTED_MEDIA_TYPE", "the dashboard takes only its own forms' posts");
  }
  return checkOrigin(c, next);
};

const checkOrigin = csrf();

/** What an operator sees must not be kept by a browser or proxy cache. */
export const noStore: MiddlewareHandler<HonoEnv> = async (c, next) => {
  await next();
  c.header("Cache-Control", "no-store");
};
