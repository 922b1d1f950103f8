import type { Context } from "hono";
import type { Tenant } from "../domain/api-keys/keys.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError, logOnce } from "./errors.ts";

/**
 * The period of wrangler.toml's `API_RATE_LIMIT` (its `simple.period`), which the
 * binding does not report: what a refused caller is told to wait (`Retry-After`).
 * test/worker/rate-limit.test.ts checks the two agree.
 */
export const RATE_LIMIT_PERIOD_SECONDS = 10;

/**
 * Each tenant API key's request budget (ADR 0034): Cloudflare's Rate Limiting binding,
 * counted per key id, so one tenant's burst cannot fill the outbox every other
 * tenant's events wait behind. Checked once the key is known (its id is the
 * counter's key, never the secret) and before the route or its body is touched.
 * Without the binding (the Node tests, an older wrangler.toml) there is no limit.
 * A limiter that fails lets the request through, logged once per isolate (per
 * distinct error): the budget protects the service; it must not become the outage.
 */
export async function spendKeyBudget(c: Context<HonoEnv>, tenant: Tenant): Promise<void> {
  const limiter = c.env?.API_RATE_LIMIT;
  if (!limiter) return;
  let allowed: boolean;
  try {
    allowed = (await limiter.limit({ key: tenant.keyId })).success;
  } catch (error) {
    logOnce(`API_RATE_LIMIT failed, requests are not limited: ${(error as Error).message}`);
    return;
  }
  if (allowed) return;
  c.header("Retry-After", String(RATE_LIMIT_PERIOD_SECONDS));
  throw new ApiError(
    "TOO_MANY_REQUESTS",
    `this API key has used its request budget for now; try again in ${RATE_LIMIT_PERIOD_SECONDS} s`,
  );
}
