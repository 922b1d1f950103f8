import { defineConfig } from "vitest/config";

// `npm run test:chaos`: the whole-system chaos suite, apart from `npm test` because it
// runs for minutes and starts its own Postgres (which it restarts mid-run).
export default defineConfig({
  test: {
    include: ["test/chaos/**/*.chaos.ts"],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    reporters: ["default", ["json", { outputFile: "reports/chaos-vitest.json" }]],
  },
});
