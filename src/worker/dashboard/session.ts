import type { Context, MiddlewareHandler } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { sign, verify } from "hono/jwt";
import { fromBase64 } from "../../domain/webhooks/base64.ts";
import type { Config, HonoEnv } from "../env.ts";
import type { DashboardEnv } from "./env.ts";
import { signInAgain } from "./layout.tsx";

/** How long a login lasts; after it the operator signs in again. */
export const SESSION_TTL_SECONDS = 12 * 60 * 60;

/** What a session's key is made from: the operator's token and, when set, the webhook secrets key. */
export type SessionSecrets = Pick<Config, "ADMIN_TOKEN" | "WEBHOOK_SECRETS_KEY">;

/**
 * The session is an HS256 JWT (Hono's helper) in a cookie: the Worker keeps no
 * memory between requests, and a signed, expiring token needs none. Its key is an
 * HMAC of ADMIN_TOKEN, so rotating the token ends every session, and the token
 * itself never signs anything a browser holds. The HMAC's key is
 * WEBHOOK_SECRETS_KEY (32 random bytes) where it is set: keyed by the token alone,
 * a captured cookie let anyone test guesses at the token offline, as fast as they
 * can compute two HMACs, however many sign-ins the lock-out refuses. Rotating
 * WEBHOOK_SECRETS_KEY ends every session too.
 */
async function sessionKey(secrets: SessionSecrets): Promise<string> {
  const encode = (text: string) => new TextEncoder().encode(text);
  const keyBytes = secrets.WEBHOOK_SECRETS_KEY
    ? fromBase64(secrets.WEBHOOK_SECRETS_KEY)
    : encode(secrets.ADMIN_TOKEN);
  const key = await crypto.subtle.importKey("raw", keyBytes, { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = await crypto.subtle.sign(
    "HMAC",
    key,
    encode(`edge-outbox dashboard session v2\n${secrets.ADMIN_TOKEN}`),
  );
  return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Plain http is accepted only on loopback, where `wrangler dev` serves; anywhere
 * else the cookie is Secure (and __Host- prefixed: no subdomain can set or
 * shadow it), so it never travels over an unencrypted hop.
 */
export function isLoopbackHttp(url: string): boolean {
  const { protocol, hostname } = new URL(url);
  return protocol === "http:" && ["127.0.0.1", "localhost", "[::1]"].includes(hostname);
}

export function cookieName(secure: boolean): string {
  return secure ? "__Host-outbox_session" : "outbox_session";
}

/** A session token issued at `issuedAt` (seconds since the epoch). */
export async function signSession(secrets: SessionSecrets, issuedAt = Math.floor(Date.now() / 1000)) {
  return sign(
    { sub: "operator", iat: issuedAt, exp: issuedAt + SESSION_TTL_SECONDS },
    await sessionKey(secrets),
    "HS256",
  );
}

export async function startSession(c: Context<HonoEnv>): Promise<void> {
  const token = await signSession(c.var.config);
  const secure = !isLoopbackHttp(c.req.url);
  setCookie(c, cookieName(secure), token, {
    httpOnly: true,
    secure,
    sameSite: "Strict",
    path: "/",
    maxAge: SESSION_TTL_SECONDS,
  });
}

export function endSession(c: Context<HonoEnv>): void {
  const secure = !isLoopbackHttp(c.req.url);
  deleteCookie(c, cookieName(secure), { path: "/", secure, httpOnly: true, sameSite: "Strict" });
}

/** True when the request carries a session cookie this deployment signed and that has not expired. */
export async function hasSession(c: Context<HonoEnv>): Promise<boolean> {
  const token = getCookie(c, cookieName(!isLoopbackHttp(c.req.url)));
  if (!token) return false;
  try {
    // verify checks the signature, the algorithm and `exp`.
    const claims = await verify(token, await sessionKey(c.var.config), "HS256");
    return claims.sub === "operator";
  } catch {
    return false;
  }
}

/**
 * Pages without a session send the browser to the login page (and back after);
 * a form post without one is refused, since replaying a post after login would
 * surprise the operator.
 */
export const requireSession: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (await hasSession(c)) {
    (c as unknown as Context<DashboardEnv>).set("signedIn", true);
    return next();
  }
  if (c.req.method === "GET" || c.req.method === "HEAD") {
    const url = new URL(c.req.url);
    return c.redirect(`/dashboard/login?next=${encodeURIComponent(url.pathname + url.search)}`, 303);
  }
  return signInAgain(c as unknown as Context<DashboardEnv>, refererPath(c.req.header("referer"), c.req.url));
};

/** The path and query of a same-origin Referer (the page a form was on), or undefined. */
function refererPath(referer: string | undefined, requestUrl: string): string | undefined {
  if (!referer || !URL.canParse(referer)) return undefined;
  const from = new URL(referer);
  return from.origin === new URL(requestUrl).origin ? from.pathname + from.search : undefined;
}
