import { describe, expect, it } from "vitest";
import { ensureDevApiKey, newDevApiKey } from "../../infra/dev-api-key.ts";
import { authenticate } from "../../src/domain/api-keys/keys.ts";
import { useTestDatabase } from "../support/db.ts";

const t = useTestDatabase();

describe("npm run dev's API key", () => {
  it("is stored on first start, found on the next, and works as a key of scope dev until revoked", async () => {
    const key = newDevApiKey();
    expect(await ensureDevApiKey(t.url, key)).toBe("created");
    expect(await ensureDevApiKey(t.url, key)).toBe("exists");
    expect(await authenticate(t.db, key)).toMatchObject({ scope: "dev" });
    await t.pool.query("UPDATE api_keys SET revoked_at = now()");
    expect(await ensureDevApiKey(t.url, key)).toBe("revoked");
    expect(await authenticate(t.db, key)).toBeNull();
  });
});
