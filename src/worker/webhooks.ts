import { createQStashDeliverQueue, type DeliverQueue } from "../domain/webhooks/deliver-queue.ts";
import { importSecretsKey } from "../domain/webhooks/secret-box.ts";
import type { Config } from "./env.ts";

/** Deliver jobs published through the same QStash as the relay's, to this Worker's `/jobs/webhook.deliver`. */
export function deliverQueueFor(config: Config): DeliverQueue {
  return createQStashDeliverQueue({
    baseUrl: config.QSTASH_URL,
    token: config.QSTASH_TOKEN,
    publicUrl: config.PUBLIC_URL,
    retries: config.WEBHOOK_RETRY_SCHEDULE.length,
  });
}

// Bindings do not change within an isolate: import the key once per value.
const keys = new Map<string, Promise<CryptoKey>>();

/** The imported WEBHOOK_SECRETS_KEY; throws when the binding is missing (a delivery cannot be signed without it). */
export function secretsKeyFor(config: Config): Promise<CryptoKey> {
  const base64 = config.WEBHOOK_SECRETS_KEY;
  if (!base64)
    return Promise.reject(new Error("binding WEBHOOK_SECRETS_KEY is missing: webhooks cannot be signed"));
  let key = keys.get(base64);
  if (!key) {
    key = importSecretsKey(base64);
    key.catch(() => keys.delete(base64));
    keys.set(base64, key);
  }
  return key;
}
