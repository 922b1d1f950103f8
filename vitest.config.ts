import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The JSON report is what .ci/run counts; the default reporter is for people.
    reporters: ["default", ["json", { outputFile: "reports/vitest.json" }]],
  },
});
