import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runScript } from "../support/cli.ts";

// The benchmarks are run by hand: --help must answer, and a mistyped command line
// must be said in a line with the usage, before any database or Worker starts,
// never as a stack trace.
const SCRIPTS = {
  bench: "../../bench/relay.ts",
  "bench:write": "../../bench/write-receipt.ts",
  "bench:workerd": "../../bench/relay-workerd.ts",
} as const;

// No DATABASE_URL: a script that went on would start an embedded Postgres.
const run = (script: keyof typeof SCRIPTS, args: string[]) =>
  runScript(fileURLToPath(new URL(SCRIPTS[script], import.meta.url)), args);

describe("the benchmarks' command lines", () => {
  it.each(Object.keys(SCRIPTS) as (keyof typeof SCRIPTS)[])(
    "npm run %s -- --help prints the usage and exits 0; a bad option exits 2 with the reason",
    async (script) => {
      const [help, unknown, badReps] = await Promise.all([
        run(script, ["--help"]),
        run(script, ["--nope"]),
        run(script, ["--reps", "0"]),
      ]);
      expect(help).toMatchObject({ code: 0, stderr: "" });
      expect(help.stdout).toMatch(new RegExp(`^usage: npm run ${script} \\[-- options\\]\\n`));
      expect(help.stdout).toContain("--reps <n>");

      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toMatch(/^Unknown option '--nope'/);
      expect(badReps.code).toBe(2);
      expect(badReps.stderr).toMatch(/^--reps must be a positive integer, got "0"\n\nusage: /);
      for (const r of [unknown, badReps]) {
        expect(r.stderr).toContain(`usage: npm run ${script}`);
        expect(r.stderr).not.toMatch(/^\s+at /m);
        expect(r.stdout).toBe("");
      }
    },
    60_000,
  );

  it("says which value is wrong for the values each phase reads", async () => {
    const cases: [string[], RegExp][] = [
      [["--only", "throughput,nope"], /^unknown phase nope; phases: throughput, concurrency,/],
      [["--db-delay", "soon"], /^--db-delay must be a number of ms ≥ 0, got "soon"/],
      [
        ["--far-edge-rtt", "5", "--near-db-rtt", "5"],
        /^--far-edge-rtt \(5\) must be larger than --near-db-rtt \(5\)/,
      ],
    ];
    const results = await Promise.all(cases.map(([args]) => run("bench", args)));
    results.forEach((r, i) => {
      expect(r.code, cases[i]![0].join(" ")).toBe(2);
      expect(r.stderr).toMatch(cases[i]![1]);
    });
  }, 60_000);
});
