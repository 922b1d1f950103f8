import { createHash, createHmac, randomBytes } from "node:crypto";

/** Upstash-Signature tokens are valid for five minutes (QStash signature docs). */
export const SIGNATURE_TTL_SECONDS = 5 * 60;

export interface SignInput {
  /** The signing key string; QStash and the SDK's Receiver use its UTF-8 bytes as the HMAC key. */
  key: string;
  /** Destination URL, becomes `sub`; the Receiver compares it with the URL it was given. */
  url: string;
  body: Buffer;
  /** Seconds since the epoch; injectable so tests can mint expired tokens. */
  now?: number;
}

const b64url = (data: Buffer | string) => Buffer.from(data).toString("base64url");

/**
 * Mints the HS256 JWT QStash puts in Upstash-Signature: iss "Upstash", sub = URL,
 * body = base64url SHA-256 of the raw body, iat/nbf = now, exp = now + 5 min, jti.
 * The Receiver strips `=` padding before comparing `body`, so unpadded is fine.
 */
export function signJwt({ key, url, body, now = Math.floor(Date.now() / 1000) }: SignInput): string {
  const header = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const payload = b64url(
    JSON.stringify({
      iss: "Upstash",
      sub: url,
      exp: now + SIGNATURE_TTL_SECONDS,
      nbf: now,
      iat: now,
      jti: `jwt_${randomBytes(12).toString("hex")}`,
      body: createHash("sha256").update(body).digest("base64url"),
    }),
  );
  const signature = createHmac("sha256", Buffer.from(key, "utf8")).update(`${header}.${payload}`).digest();
  return `${header}.${payload}.${b64url(signature)}`;
}

/** Same shape as Upstash's keys (`sig_` + random); only ever used as HMAC key text. */
export function generateSigningKey(): string {
  return `sig_${randomBytes(21).toString("base64url")}`;
}
