import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { configSchema, parseConfig } from "../../src/worker/env.ts";
import { bindings } from "../support/worker.ts";

// README "Deploying for real", step 3, is where a deploying team learns every binding
// and what an unset one means; wrangler.toml sends readers there. It had drifted from
// the schema: five optional bindings had no default written anywhere, and MAIL_TO's
// was ops@example.com (the deploy walkthrough).
const readme = await readFile(new URL("../../README.md", import.meta.url), "utf8");
const step3 = readme.slice(readme.indexOf("3. **Secrets**"), readme.indexOf("4. `npm run deploy`"));
const rows = new Map(
  [...step3.matchAll(/^\s*\| `([A-Z_]+)`\s*\|([^|]*)\|/gm)].map((m) => [m[1]!, m[2]!.trim()] as const),
);
// Read by the Worker only where the local stack's proxy stands in for Neon.
const LOCAL_ONLY = ["NEON_WS_PROXY", "NEON_PIPELINE_CONNECT"];

describe("README's list of bindings (Deploying for real, step 3)", () => {
  it("names every binding the Worker's schema reads", () => {
    expect(step3.length).toBeGreaterThan(1000);
    const unnamed = Object.keys(configSchema.shape).filter(
      (name) => !LOCAL_ONLY.includes(name) && !step3.includes(`\`${name}\``),
    );
    expect(unnamed).toEqual([]);
  });

  it("gives each optional binding a row, and each number the default the schema applies", () => {
    const required = Object.entries(configSchema.shape)
      .filter(([, schema]) => !schema.safeParse(undefined).success)
      .map(([name]) => name);
    const optional = Object.keys(configSchema.shape).filter(
      (name) => !required.includes(name) && !LOCAL_ONLY.includes(name) && name !== "WEBHOOK_SECRETS_KEY",
    );
    expect([...rows.keys()].sort()).toEqual(optional.sort());
    const parsed = parseConfig(bindings({ WEBHOOK_SECRETS_KEY: undefined }));
    if (!parsed.ok) throw new Error(parsed.message);
    for (const [name, unset] of rows) {
      const value: unknown = Reflect.get(parsed.config, name);
      if (typeof value === "number") expect(unset, name).toMatch(new RegExp(`^${value}\\b`));
    }
  });
});
