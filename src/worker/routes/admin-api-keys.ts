import { z } from "zod";
import { apiKeyInput, createApiKey, listApiKeys, revokeApiKey } from "../../domain/api-keys/keys.ts";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";
import { noBody, valid } from "../validate.ts";
import { ID } from "./params.ts";

/**
 * Tenant API keys, managed with the operator token (the /admin/* bearer auth
 * registered by registerAdmin, which must come first). The key itself is in the
 * answer to POST only; it is stored as a SHA-256 hash and cannot be shown again.
 */
export function registerAdminApiKeys(app: App) {
  app.post("/admin/api-keys", valid("json", apiKeyInput), async (c) => {
    const { apiKey, key } = await createApiKey(c.var.db, c.req.valid("json"));
    return c.json({ apiKey, key }, 201);
  });

  // Takes no parameter: `?scope=` or `?limit=` answered every key, as if they had applied.
  app.get("/admin/api-keys", valid("query", z.strictObject({})), async (c) =>
    c.json({ apiKeys: await listApiKeys(c.var.db) }),
  );

  app.delete(`/admin/api-keys/${ID}`, noBody, async (c) => {
    const revoked = await revokeApiKey(c.var.db, c.req.param("id"));
    if (!revoked) throw new ApiError("NOT_FOUND", `API key ${c.req.param("id")} not found`);
    return c.json({ apiKey: revoked.apiKey });
  });
}
