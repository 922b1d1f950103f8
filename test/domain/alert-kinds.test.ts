import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ALERT_KINDS } from "../../src/domain/alert-kinds.ts";
import { SUBSCRIPTION_NAMES } from "../../src/domain/subscriptions.ts";
import { DELIVER_JOB } from "../../src/domain/webhooks/deliver-queue.ts";

// The list a resolve by kind is checked against must be the kinds the code raises:
// a kind missing from it could not be resolved by kind from the CLI or the API, and
// one listed that nothing raises would pass a typo. Read from the source, each file
// that inserts alerts: the quoted `area.name` literals that are not a job's name.
async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && /\.tsx?$/.test(e.name))
    .map((e) => path.join(e.parentPath, e.name));
}

describe("ALERT_KINDS", () => {
  it("is exactly the kinds the code inserts into outbox_alerts", async () => {
    const jobNames = new Set<string>([...SUBSCRIPTION_NAMES, DELIVER_JOB]);
    const raised = new Set<string>();
    for (const file of await sourceFiles(path.resolve(import.meta.dirname, "../../src"))) {
      const text = await readFile(file, "utf8");
      if (!text.includes("INSERT INTO outbox_alerts")) continue;
      for (const [, kind] of text.matchAll(/'([a-z]+\.[a-z_]+)'/g))
        if (!jobNames.has(kind!)) raised.add(kind!);
    }
    expect([...raised].sort()).toEqual([...ALERT_KINDS].sort());
  });
});
