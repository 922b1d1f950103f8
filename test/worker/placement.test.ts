// Smart Placement is a deployment setting with no behaviour to observe locally
// (wrangler dev runs the Worker on this machine wherever it is set), so what can
// break is the setting itself: dropped, misspelt, or changed by a config edit.
// Read through wrangler's own config reader, as `wrangler deploy` reads it, so a
// misspelt table (`[placment]`, which wrangler only warns about and drops) or mode
// (`"smrt"`, which it refuses) fails here rather than deploying a Worker at the
// caller's edge, two database round trips per pass away from Neon (ADR 0017).
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";

const WRANGLER_TOML = fileURLToPath(new URL("../../wrangler.toml", import.meta.url));

/** The placement wrangler would deploy for this text of wrangler.toml. */
const placementOf = (config: string) => unstable_readConfig({ config }, { hideWarnings: true }).placement;

describe("wrangler.toml placement", () => {
  let dir: string;
  let text: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "placement-"));
    text = await readFile(WRANGLER_TOML, "utf8");
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** A copy of wrangler.toml with one edit, beside the original's entry point. */
  const edited = async (name: string, from: string, to: string) => {
    expect(text).toContain(from);
    const path = join(dir, `${name}.toml`);
    await writeFile(path, text.replace(from, to).replace(/^main = .*$/m, `main = "${WRANGLER_TOML}"`));
    return path;
  };

  it("deploys the Worker with Smart Placement", () => {
    expect(placementOf(WRANGLER_TOML)).toEqual({ mode: "smart" });
  });

  // The reader is what makes the first test meaningful: these show it tells the
  // edits apart, so the first test would fail on any of them.
  it("reads a misspelt table as no placement at all", async () => {
    expect(placementOf(await edited("table", "[placement]", "[placment]"))).toBeUndefined();
  });

  it("refuses a misspelt mode", async () => {
    const path = await edited("mode", 'mode = "smart"', 'mode = "smrt"');
    expect(() => placementOf(path)).toThrow(/placement\.mode/);
  });
});
