import { drizzle } from "drizzle-orm/node-postgres";
import { beforeEach, describe, expect, it } from "vitest";
import { authenticate } from "../../src/domain/api-keys/keys.ts";
import type { Db } from "../../src/domain/db.ts";
import { expectUsageErrors, runCli } from "../support/cli.ts";
import { useTestDatabase } from "../support/db.ts";

// `npm run outbox -- api-keys …` against a real database: the key it prints is the one
// the Worker then accepts, and a revoked one is refused.
const t = useTestDatabase();
// CASCADE: idempotency keys belong to an API key (a foreign key).
beforeEach(() => t.pool.query("TRUNCATE api_keys CASCADE"));
const env = () => ({ DATABASE_URL: t.url });
const db = () => drizzle(t.pool) as unknown as Db;

describe("api-keys", () => {
  it("creates a key that authenticates in its scope, lists it without the key, and revokes it", async () => {
    const created = await runCli(["api-keys", "create", "--scope", "acme", "--name", "acme backend"], env());
    expect(created.code).toBe(0);
    const [heading, keyLine, note] = created.stdout.trimEnd().split("\n");
    expect(heading).toMatch(/^API key [0-9a-f-]{36} for scope "acme" \(acme backend\):$/);
    expect(note).toBe("shown once: only its SHA-256 is stored");
    const key = keyLine!.trim();
    expect(key).toMatch(/^eo_[A-Za-z0-9_-]{43}$/);
    const id = /API key ([0-9a-f-]{36})/.exec(heading!)![1]!;
    expect(await authenticate(db(), key)).toEqual({ keyId: id, scope: "acme" });

    const unscoped = JSON.parse(
      (await runCli(["api-keys", "create", "--unscoped", "--name", "ops", "--json"], env())).stdout,
    );
    expect(unscoped.apiKey).toMatchObject({ scope: null, name: "ops", revokedAt: null });
    expect(await authenticate(db(), unscoped.key)).toEqual({ keyId: unscoped.apiKey.id, scope: null });

    const list = await runCli(["api-keys", "list"], env());
    expect(list.stdout).toMatch(/^ID\s+SCOPE\s+NAME\s+PREFIX\s+CREATED\s+LAST USED\s+REVOKED\n/);
    expect(list.stdout).toContain(`${id}  acme`);
    expect(list.stdout).toContain(`${key.slice(0, 12)}…`);
    // The key itself is never shown again.
    expect(list.stdout).not.toContain(key);
    expect(list.stdout).not.toContain(unscoped.key);

    const revoked = await runCli(["api-keys", "revoke", id], env());
    expect(revoked.stdout).toBe(
      `revoked API key ${id} (${key.slice(0, 12)}…, acme backend): it is refused from now on\n`,
    );
    expect(await authenticate(db(), key)).toBeNull();
    expect(await authenticate(db(), unscoped.key)).not.toBeNull();
    const again = JSON.parse((await runCli(["api-keys", "revoke", id, "--json"], env())).stdout);
    expect(again).toMatchObject({ revokedNow: false, apiKey: { id, revokedAt: expect.any(String) } });

    const unknown = await runCli(
      ["api-keys", "revoke", "00000000-0000-4000-8000-000000000000", "--json"],
      env(),
    );
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stdout)).toEqual({
      error: { code: "not_found", message: "no API key 00000000-0000-4000-8000-000000000000" },
    });
  });

  it("checks its command line before the database, asking for the scope explicitly", async () => {
    const results = await expectUsageErrors([
      [["api-keys"], /api-keys needs a command: list, create or revoke/],
      [["api-keys", "rotate"], /unknown api-keys command "rotate"/],
      [["api-keys", "create", "--name", "x"], /api-keys create takes --scope <scope> or --unscoped/],
      [
        ["api-keys", "create", "--name", "x", "--scope", "a", "--unscoped"],
        /takes --scope <scope> or --unscoped/,
      ],
      [["api-keys", "create", "--scope", "acme"], /api-keys create takes --name <name>/],
      [["api-keys", "create", "--scope", "acme", "--name", ""], /--name must not be empty/],
      [["api-keys", "create", "--scope", "a\tb", "--name", "x"], /--scope /],
      // The API's words for a rule, not zod's "Too big: expected string to have <=128 characters".
      [
        ["api-keys", "create", "--scope", "s".repeat(200), "--name", "x"],
        /--scope must be at most 128 characters\n/,
      ],
      [["api-keys", "revoke"], /api-keys revoke takes one API key id/],
      [["api-keys", "list", "--name", "x"], /--name is not an option of api-keys list/],
    ]);
    for (const r of results) expect(r.stderr).not.toMatch(/DATABASE_URL is not set/);
    const badId = await runCli(["api-keys", "revoke", "nope"], env());
    expect(badId.code).toBe(2);
    expect(badId.stderr).toMatch(/"nope" is not an API key id \(a UUID\)/);
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM api_keys");
    expect(rows[0].n).toBe(0);
  }, 120_000);
});
