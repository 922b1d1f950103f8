import type { MiddlewareHandler } from "hono";
import { importSecretsKey } from "../domain/webhooks/secret-box.ts";
import type { Config, HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";

// Importing a key costs a WebCrypto call; the binding is fixed for an isolate's life.
const imported = new Map<string, Promise<CryptoKey>>();

const MISSING =
  "Worker misconfigured: binding WEBHOOK_SECRETS_KEY is missing; webhook endpoint secrets cannot be " +
  "sealed or opened without it (base64 of 32 random bytes, e.g. `openssl rand -base64 32`)";

/**
 * The AES-GCM key endpoint secrets are sealed under. WEBHOOK_SECRETS_KEY is
 * optional for the Worker as a whole (notes and the relay run without it), so
 * whatever needs it asks here and gets a 500 naming the binding when it is absent.
 */
export function webhookSecretsKey(config: Config): Promise<CryptoKey> {
  const raw = config.WEBHOOK_SECRETS_KEY;
  if (!raw) throw new ApiError("MISCONFIGURED", MISSING);
  let key = imported.get(raw);
  if (!key) {
    key = importSecretsKey(raw);
    imported.set(raw, key);
  }
  return key;
}

/** Before validation: a request that cannot succeed on this deployment hears why first. */
export const requireSecretsKey: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (!c.var.config.WEBHOOK_SECRETS_KEY) throw new ApiError("MISCONFIGURED", MISSING);
  await next();
};
