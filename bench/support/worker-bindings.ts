import { randomBytes } from "node:crypto";
import { newSecretsKey } from "../../src/domain/webhooks/secret-box.ts";

/**
 * What every Worker a benchmark starts is given beside its stack's own bindings: a
 * throwaway admin token and secrets key, and endpoints on 127.0.0.1 allowed.
 */
export function workerBindings() {
  return {
    ADMIN_TOKEN: `bench_admin_${randomBytes(18).toString("base64url")}`,
    WEBHOOK_SECRETS_KEY: newSecretsKey(),
    WEBHOOK_ALLOW_PRIVATE_URLS: "true",
  };
}
