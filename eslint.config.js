// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

// Code that runs inside the Worker must stay edge-safe: no Node built-ins. A later
// no-restricted-imports block replaces an earlier one for its files, so each
// block below lists this pattern again.
const EDGE_SAFE = { group: ["node:*", "pg", "ws"], message: "Worker code must be edge-safe" };

export default tseslint.config(
  { ignores: ["node_modules/", "drizzle/meta/", ".dev/", ".wrangler/", "reports/", "dist/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "no-console": "off",
    },
  },
  {
    files: ["src/outbox/**/*.ts", "src/domain/**/*.ts", "src/worker/**/*.{ts,tsx}"],
    rules: {
      "no-restricted-imports": ["error", { patterns: [EDGE_SAFE] }],
    },
  },
  {
    // app.ts imports every route, so a route that imported it would close a cycle:
    // routes take the app's type from new-app.ts.
    files: ["src/worker/routes/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            EDGE_SAFE,
            {
              group: ["**/worker/app.ts", "../app.ts"],
              message: "Import `type App` from new-app.ts, not app.ts",
            },
          ],
        },
      ],
    },
  },
  {
    // The event bus core is a library: the domain and the Worker depend on it, never
    // the reverse, so it can be reused and changed without reading the app around it.
    files: ["src/outbox/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            EDGE_SAFE,
            {
              group: ["**/domain/**", "**/domain", "**/worker/**", "**/worker", "**/cli/**", "**/node/**"],
              message:
                "The core (src/outbox) imports nothing from the domain, the Worker, the CLI or Node code",
            },
          ],
        },
      ],
    },
  },
);
