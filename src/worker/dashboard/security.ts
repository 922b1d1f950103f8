import type { MiddlewareHandler } from "hono";
import { csrf } from "hono/csrf";
import { requireMediaType } from "../validate.ts";
import { NONCE, secureHeaders } from "hono/secure-headers";
import type { HonoEnv } from "../env.ts";

/**
 * Headers for every dashboard answer. The policy allows nothing by default:
 * styles only from our own stylesheet, scripts only with this response's nonce
 * (one small enhancement script, the pages work without it), requests from that
 * script and forms only to ourselves (the script reads a watched page again
 * instead of reloading it), and no framing at all (clickjacking a requeue button).
 */
export const dashboardHeaders: MiddlewareHandler<HonoEnv> = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: [NONCE],
    styleSrc: ["'self'"],
    imgSrc: ["'self'"],
    connectSrc: ["'self'"],
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
  // The dashboard's forms send only form types, so nothing else is taken at all: the
  // form validators' own check, made here for the routes with no body to validate too.
  if (!/^(GET|HEAD|OPTIONS)$/.test(c.req.method)) requireMediaType(c.req.header("content-type"), "form");
  return checkOrigin(c, next);
};

const checkOrigin = csrf();

/** What an operator sees must not be kept by a browser or proxy cache. */
export const noStore: MiddlewareHandler<HonoEnv> = async (c, next) => {
  await next();
  c.header("Cache-Control", "no-store");
};
