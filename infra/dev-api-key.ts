import { randomBytes } from "node:crypto";
import pg from "pg";
import { hashKey, KEY_PREFIX } from "../src/domain/api-keys/keys.ts";

export const DEV_KEY_SCOPE = "dev";

/** A key in the format the Worker issues, made here so it can be kept before it is stored. */
export function newDevApiKey(): string {
  return `${KEY_PREFIX}${randomBytes(32).toString("base64url")}`;
}

/**
 * Makes sure the dev stack's API key (kept in .dev/secrets.json) is a live key in
 * this database: stored on first start, stored again after the database was
 * reset, left alone (and said so) if an operator revoked it.
 */
export async function ensureDevApiKey(
  databaseUrl: string,
  key: string,
): Promise<"created" | "exists" | "revoked"> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const keyHash = await hashKey(key);
    const { rows } = await client.query<{ revoked: boolean }>(
      "SELECT revoked_at IS NOT NULL AS revoked FROM api_keys WHERE key_hash = $1",
      [keyHash],
    );
    if (rows[0]) return rows[0].revoked ? "revoked" : "exists";
    await client.query(
      `INSERT INTO api_keys (scope, name, prefix, key_hash) VALUES ($1, 'npm run dev', $2, $3)
       ON CONFLICT (key_hash) DO NOTHING`,
      [DEV_KEY_SCOPE, key.slice(0, 12), keyHash],
    );
    return "created";
  } finally {
    await client.end();
  }
}
