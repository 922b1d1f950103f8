import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ONE_OFF_PARAMS } from "../../src/worker/dashboard/layout.tsx";
import { afterRetry, afterRetryAll } from "../../src/worker/dashboard/pages/job-failures.tsx";

// The dashboard takes a notice's flags out of the address once the page is shown
// (layout.tsx). A redirect that adds a flag the list misses leaves it there, and a
// reload says the notice again; one the list names that a page reads as a filter
// would lose the filter. Read from the source: every redirect's literal flags.
const DIR = join(import.meta.dirname, "../../src/worker/dashboard");

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sources(join(dir, d.name)) : /\.tsx?$/.test(d.name) ? [join(dir, d.name)] : [],
  );
}

describe("the notice flags a redirect adds", () => {
  it("are all taken out of the address, and only they", () => {
    const flags = new Set<string>();
    for (const file of sources(DIR)) {
      for (const [, target] of readFileSync(file, "utf8").matchAll(/c\.redirect\(\s*[`"]([^`"]*)[`"]/g)) {
        for (const [, name] of target!.matchAll(/[?&]([A-Za-z]+)=/g)) flags.add(name!);
      }
    }
    // Built outside the redirect: a retry's way back, and a requeue's outcome on the event's page.
    for (const target of [
      afterRetry(undefined, 7),
      afterRetryAll(undefined, 3),
      "?requeued=1",
      "?unchanged=1",
    ])
      for (const [, name] of target.matchAll(/[?&]([A-Za-z]+)=/g)) flags.add(name!);
    // The sign-in's `next` is where to go once signed in: carried, not a notice.
    flags.delete("next");
    expect(flags.size).toBeGreaterThanOrEqual(12);
    for (const flag of flags) expect(ONE_OFF_PARAMS, flag).toContain(flag);
    expect(ONE_OFF_PARAMS).not.toContain("next");
  });
});
