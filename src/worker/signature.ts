import { Receiver } from "@upstash/qstash";
import type { Context, MiddlewareHandler } from "hono";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";

/**
 * Reads the raw body and verifies QStash's `Upstash-Signature` over those exact
 * bytes, for the URL this route is published at, before anything parses the body.
 * Awaited: an un-awaited verify lets a forged request through. The URL check makes
 * a job signed for one subscription useless at another (or at the failure route).
 * Current and next keys: the Receiver tries both, so a key rotation drops nothing.
 * Answers the raw body text once it is trusted.
 */
/**
 * On `/jobs/*`, before the body is read or capped: a request without a signature
 * is refused at once, so an unsigned caller cannot make the Worker buffer anything.
 * QStash only POSTs; any other method is told so (405) rather than asked for a
 * signature no GET could carry.
 */
export const requireSignatureHeader: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (c.req.method !== "POST") {
    c.header("Allow", "POST");
    throw new ApiError(
      "METHOD_NOT_ALLOWED",
      `the job routes take only POST (QStash's deliveries), not ${c.req.method}`,
    );
  }
  if (!c.req.header("upstash-signature")) throw new ApiError("UNAUTHORIZED", "missing Upstash-Signature");
  await next();
};

export async function verifiedBody(c: Context<HonoEnv>, expectedUrl: string): Promise<string> {
  const signature = c.req.header("upstash-signature");
  if (!signature) throw new ApiError("UNAUTHORIZED", "missing Upstash-Signature");
  const body = await c.req.text();
  const receiver = new Receiver({
    currentSigningKey: c.var.config.QSTASH_CURRENT_SIGNING_KEY,
    nextSigningKey: c.var.config.QSTASH_NEXT_SIGNING_KEY,
    // Never fall back to the SDK's built-in dev keys, whatever the environment says.
    devMode: false,
  });
  let valid = false;
  try {
    valid = await receiver.verify({ signature, body, url: expectedUrl });
  } catch (error) {
    // The reason (expired, wrong URL, body hash) is for the operator, not the caller:
    // a wrong PUBLIC_URL shows up here as "invalid subject" on every job.
    console.warn(`rejected Upstash-Signature on ${c.req.path}: ${(error as Error).message}`);
  }
  // The SDK checks exp only when a token has one; QStash always sets it, and a
  // token without it would be replayable forever.
  if (!valid || !hasExpiry(signature)) throw new ApiError("UNAUTHORIZED", "invalid Upstash-Signature");
  return body;
}

function hasExpiry(jwt: string): boolean {
  try {
    const payload = jwt.split(".")[1] ?? "";
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
    return typeof (JSON.parse(json) as { exp?: unknown }).exp === "number";
  } catch {
    return false;
  }
}
