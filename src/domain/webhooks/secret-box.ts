import { fromBase64, toBase64 } from "./base64.ts";

/**
 * Endpoint secrets at rest: AES-256-GCM under the WEBHOOK_SECRETS_KEY binding
 * (base64 of 32 random bytes), so a database dump alone cannot sign a webhook.
 * A box is `v1.<iv>.<ciphertext+tag>` (base64). The endpoint id is bound in as
 * additional data: a box copied onto another endpoint's row does not open.
 */

const version = "v1";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class SecretBoxError extends Error {
  override readonly name = "SecretBoxError";
}

/** Imports the binding's key once per isolate use; throws SecretBoxError when it is not 32 base64 bytes. */
export async function importSecretsKey(base64Key: string): Promise<CryptoKey> {
  let raw: Uint8Array<ArrayBuffer>;
  try {
    raw = fromBase64(base64Key.trim());
  } catch {
    throw new SecretBoxError("WEBHOOK_SECRETS_KEY is not base64");
  }
  if (raw.length !== 32) throw new SecretBoxError("WEBHOOK_SECRETS_KEY must be 32 bytes (base64)");
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** A fresh key for `.dev.vars` or `wrangler secret put`: base64 of 32 random bytes. */
export function newSecretsKey(): string {
  return toBase64(crypto.getRandomValues(new Uint8Array(32)));
}

export async function sealSecret(key: CryptoKey, secret: string, endpointId: string): Promise<string> {
  // A random 96-bit IV per box: GCM must never reuse one under the same key.
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: encoder.encode(endpointId) },
    key,
    encoder.encode(secret),
  );
  return `${version}.${toBase64(iv)}.${toBase64(new Uint8Array(sealed))}`;
}

/** Throws SecretBoxError when the box is malformed, was sealed under another key, or belongs to another endpoint. */
export async function openSecret(key: CryptoKey, box: string, endpointId: string): Promise<string> {
  const [v, iv, data] = box.split(".");
  if (v !== version || !iv || !data) throw new SecretBoxError("not a v1 secret box");
  try {
    const plain = await crypto.subtle.decrypt(
      { name: "AES-GCM", iv: fromBase64(iv), additionalData: encoder.encode(endpointId) },
      key,
      fromBase64(data),
    );
    return decoder.decode(plain);
  } catch {
    throw new SecretBoxError("secret box does not open with this key and endpoint");
  }
}
