/**
 * Standard Webhooks signing (https://www.standardwebhooks.com), with WebCrypto
 * only, so it runs unchanged in workerd and Node. Secrets are `whsec_` + base64
 * of the key bytes; the HMAC is keyed with the decoded bytes, not the string.
 */

import { fromBase64, toBase64 } from "./base64.ts";

const prefix = "whsec_";
const encoder = new TextEncoder();

/** A new endpoint secret: 32 random bytes (the spec asks for at least 24). */
export function newSecret(): string {
  return prefix + toBase64(crypto.getRandomValues(new Uint8Array(32)));
}

export interface SignInput {
  /** The event id: the same across retries, so receivers can deduplicate. */
  id: string;
  /** Seconds since the epoch at the attempt, not at the event: receivers reject stale timestamps. */
  timestamp: number;
  /** The exact bytes that are POSTed; receivers verify these, not re-serialised JSON. */
  body: string;
  /** The current secret first; during a rotation also the previous one, so both verify. */
  secrets: readonly string[];
}

/** The three Standard Webhooks headers; `webhook-signature` carries one `v1,` entry per secret. */
export interface SignedHeaders {
  "webhook-id": string;
  "webhook-timestamp": string;
  "webhook-signature": string;
}

export async function signHeaders(input: SignInput): Promise<SignedHeaders> {
  const content = encoder.encode(`${input.id}.${input.timestamp}.${input.body}`);
  const signatures = await Promise.all(
    input.secrets.map(async (secret) => {
      const key = await crypto.subtle.importKey(
        "raw",
        secretBytes(secret),
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign"],
      );
      return `v1,${toBase64(new Uint8Array(await crypto.subtle.sign("HMAC", key, content)))}`;
    }),
  );
  return {
    "webhook-id": input.id,
    "webhook-timestamp": String(input.timestamp),
    "webhook-signature": signatures.join(" "),
  };
}

function secretBytes(secret: string): Uint8Array<ArrayBuffer> {
  if (!secret.startsWith(prefix)) throw new Error("webhook secret must start with whsec_");
  return fromBase64(secret.slice(prefix.length));
}
