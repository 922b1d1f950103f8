import { apiKeyInput, createApiKey, listApiKeys, revokeApiKey } from "../domain/api-keys/keys.ts";
import { idArgument, Refusal, UsageError } from "./args.ts";
import { dbOf, type Command } from "./command.ts";
import { formatApiKeys } from "./format.ts";
import { plainWords } from "../worker/validate.ts";

/**
 * `api-keys list|create|revoke`: tenant keys, the same use cases as /admin/api-keys,
 * for an operator at a terminal (a leaked key revoked without the operator token).
 */
export const apiKeysCommand: Command = ({ options, sub, rest }) => {
  if (sub === "list") {
    if (rest.length > 0) throw new UsageError(`api-keys list takes no argument, got "${rest[0]}"`);
    return async ({ pool, print }) => {
      const keys = await listApiKeys(dbOf(pool));
      print(keys, () => formatApiKeys(keys));
      return 0;
    };
  }
  if (sub === "create") {
    if (rest.length > 0) throw new UsageError(`api-keys create takes no argument, got "${rest[0]}"`);
    // The scope is asked for explicitly, never by omission, as POST /admin/api-keys does.
    if ((options.scope === undefined) === !options.unscoped) {
      throw new UsageError(
        "api-keys create takes --scope <scope> or --unscoped (a key for rows without a scope)",
      );
    }
    // In the API's words ("must be at most 128 characters"), not zod's ("Too big: …").
    const parsed = apiKeyInput.safeParse(
      { scope: options.unscoped ? null : options.scope, name: options.name },
      { error: plainWords("json") },
    );
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = String(issue.path[0] ?? "name");
      throw new UsageError(
        options.name === undefined && field === "name"
          ? "api-keys create takes --name <name> (who the key is for)"
          : `--${field} ${issue.message}`,
      );
    }
    return async ({ pool, print }) => {
      const { apiKey, key } = await createApiKey(dbOf(pool), parsed.data);
      print({ apiKey, key }, () =>
        [
          `API key ${apiKey.id} for ${apiKey.scope === null ? "rows without a scope" : `scope "${apiKey.scope}"`} (${apiKey.name}):`,
          `  ${key}`,
          "shown once: only its SHA-256 is stored",
        ].join("\n"),
      );
      return 0;
    };
  }
  if (sub === "revoke") {
    const [raw] = rest;
    if (!raw || rest.length > 1) throw new UsageError("api-keys revoke takes one API key id");
    const id = idArgument(raw, "an API key", "uuid");
    return async ({ pool, print }) => {
      const revoked = await revokeApiKey(dbOf(pool), id);
      if (!revoked) throw new Refusal("not_found", `no API key ${id}`);
      const { apiKey, revokedNow } = revoked;
      print({ apiKey, revokedNow }, () =>
        revokedNow
          ? `revoked API key ${apiKey.id} (${apiKey.prefix}…, ${apiKey.name}): it is refused from now on`
          : `API key ${apiKey.id} was revoked at ${apiKey.revokedAt!.toISOString()}`,
      );
      return 0;
    };
  }
  throw new UsageError(
    sub === undefined
      ? "api-keys needs a command: list, create or revoke"
      : `unknown api-keys command "${sub}" (list, create, revoke)`,
  );
};
