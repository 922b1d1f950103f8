import { and, desc, eq, isNull, sql } from "drizzle-orm";
import { z } from "zod";
import type { Db } from "../db.ts";
import { apiKeys } from "../schema.ts";
import { sha256Hex, scopeValue, singleLine } from "../text.ts";

/**
 * Tenant API keys. A key is `eo_` + 32 random bytes (base64url): recognisable in
 * a config file or a leaked log, unguessable. Only its SHA-256 is stored; the key
 * is shown once, when it is created. `prefix` (the first 12 characters) tells
 * keys apart in a list without revealing them. A key acts in exactly one scope;
 * a null scope is a scope of its own and matches only null.
 */
export const KEY_PREFIX = "eo_";
const SHOWN_PREFIX_LENGTH = 12;

export const apiKeyInput = z.strictObject({
  // Required, so a key for the null scope is asked for explicitly, never by omission.
  scope: scopeValue,
  name: singleLine(200),
});
export type ApiKeyInput = z.input<typeof apiKeyInput>;

export interface ApiKey {
  id: string;
  scope: string | null;
  name: string;
  prefix: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  revokedAt: Date | null;
}

/** Who is calling, once a key has been checked. */
export interface Tenant {
  keyId: string;
  scope: string | null;
}

const publicColumns = {
  id: apiKeys.id,
  scope: apiKeys.scope,
  name: apiKeys.name,
  prefix: apiKeys.prefix,
  createdAt: apiKeys.createdAt,
  lastUsedAt: apiKeys.lastUsedAt,
  revokedAt: apiKeys.revokedAt,
};

export async function createApiKey(db: Db, input: ApiKeyInput): Promise<{ apiKey: ApiKey; key: string }> {
  const { scope, name } = apiKeyInput.parse(input);
  const key = `${KEY_PREFIX}${base64url(crypto.getRandomValues(new Uint8Array(32)))}`;
  const [apiKey] = await db
    .insert(apiKeys)
    .values({ scope, name, prefix: key.slice(0, SHOWN_PREFIX_LENGTH), keyHash: await hashKey(key) })
    .returning(publicColumns);
  if (!apiKey) throw new Error("createApiKey: INSERT returned no row");
  return { apiKey, key };
}

export async function listApiKeys(db: Db): Promise<ApiKey[]> {
  return db.select(publicColumns).from(apiKeys).orderBy(desc(apiKeys.createdAt), apiKeys.id);
}

/**
 * Revokes a key; revoking it again changes nothing (`revokedNow` false). Null when
 * there is no such key.
 */
export async function revokeApiKey(
  db: Db,
  id: string,
): Promise<{ apiKey: ApiKey; revokedNow: boolean } | null> {
  const [revoked] = await db
    .update(apiKeys)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
    .returning(publicColumns);
  if (revoked) return { apiKey: revoked, revokedNow: true };
  const [existing] = await db.select(publicColumns).from(apiKeys).where(eq(apiKeys.id, id));
  return existing ? { apiKey: existing, revokedNow: false } : null;
}

/**
 * The tenant a presented key stands for, or null for an unknown or revoked key.
 * One statement: the lookup by hash, and `last_used_at` refreshed at most once a
 * minute, so a busy key does not write its row on every request.
 */
export async function authenticate(db: Db, key: string): Promise<Tenant | null> {
  if (!key.startsWith(KEY_PREFIX) || key.length > 200) return null;
  const result = await db.execute(sql`
    WITH k AS (
      SELECT id, scope, last_used_at FROM api_keys
       WHERE key_hash = ${await hashKey(key)} AND revoked_at IS NULL
    ), touched AS (
      UPDATE api_keys a SET last_used_at = now() FROM k
       WHERE a.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
    )
    SELECT id, scope FROM k`);
  const row = (result as unknown as { rows: { id: string; scope: string | null }[] }).rows[0];
  return row ? { keyId: row.id, scope: row.scope } : null;
}

/** Hex SHA-256: a key carries 256 random bits, so a fast hash is enough (no password stretching). */
export async function hashKey(key: string): Promise<string> {
  return sha256Hex(key);
}

function base64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
