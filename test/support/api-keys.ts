import type { NodePgDatabase } from "drizzle-orm/node-postgres";
import { createApiKey } from "../../src/domain/api-keys/keys.ts";

/** A new tenant API key for `scope` in the test's database; answers the key itself. */
export async function newApiKey(db: NodePgDatabase, scope: string | null = null, name = "test key") {
  return (await createApiKey(db, { scope, name })).key;
}

/** Adds `Authorization: Bearer <key>` to a request's init, keeping its other headers. */
export function withKey(key: string, init: RequestInit = {}): RequestInit {
  const headers = new Headers(init.headers);
  if (!headers.has("authorization")) headers.set("authorization", `Bearer ${key}`);
  return { ...init, headers };
}
