import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { useTestDatabase } from "../support/db.ts";
import {
  cliEnvWithQStash,
  insertJobFailure,
  jobFailureRow,
  usePausedQStash,
} from "../support/job-failures.ts";

// Under --json a script reads stdout: every refusal must be one JSON object there,
// with the exit code the text form has.
const t = useTestDatabase();
const paused = usePausedQStash(t);

const env = () => cliEnvWithQStash(t, paused);

/**
 * The refusal a --json run printed: stdout is exactly one `{ error }` object, and
 * the text form is not also on stderr (where a library may still log its own lines).
 */
function refusal(r: CliResult, exit: number): { code: string; message: string } {
  expect(r.code, r.stdout + r.stderr).toBe(exit);
  expect(r.stderr).not.toMatch(/edge-outbox:|usage:/);
  const answer = JSON.parse(r.stdout) as { error: { code: string; message: string } };
  expect(Object.keys(answer)).toEqual(["error"]);
  expect(Object.keys(answer.error)).toEqual(["code", "message"]);
  return answer.error;
}

describe("outbox CLI refusals under --json", () => {
  it("a wrong command line is a usage error, exit 2, without the usage text", async () => {
    const cases: [string[], string][] = [
      [["--json"], "no command given"],
      [["bogus", "--json"], 'unknown command "bogus"'],
      [
        ["events", "list", "--limit", "1e3", "--json"],
        '--limit must be an integer from 1 to 10000, got "1e3"',
      ],
      [["relay", "drain", "--budget", "0", "--json"], '--budget must be a positive integer, got "0"'],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(args)));
    results.forEach((r, i) => {
      expect(refusal(r, 2), cases[i]![0].join(" ")).toEqual({ code: "usage", message: cases[i]![1] });
    });
  });

  it("answers in JSON even when parseArgs refuses the command line", async () => {
    const unknown = refusal(await runCli(["stats", "--verbose", "--json"]), 2);
    expect(unknown.code).toBe("usage");
    expect(unknown.message).toBe("--verbose is not an option");
    // `--json` taken for --type's value is refused by parseArgs, but the caller asked for JSON.
    const ambiguous = refusal(await runCli(["events", "list", "--type", "--json"]), 2);
    expect(ambiguous.message).toBe(
      "--type needs a value; one that starts with a dash goes as --type=<value>",
    );
    // In the CLI's words, each on one line: parseArgs's own sent a mistyped flag after `--`.
    const said = await Promise.all(
      [
        ["events", "list", "--limit"],
        ["stats", "--json=yes"],
        ["events", "list", "--limit", "-1"],
      ].map(async (args) => refusal(await runCli(["--json", ...args]), 2).message),
    );
    expect(said).toEqual([
      "--limit needs a value",
      "--json takes no value",
      "--limit needs a value; one that starts with a dash goes as --limit=<value>",
    ]);
  });

  it("a missing or wrong variable is a config error, exit 2", async () => {
    expect(refusal(await runCli(["stats", "--json"]), 2)).toEqual({
      code: "config",
      message: "DATABASE_URL is not set (environment or .env)",
    });
    expect(refusal(await runCli(["relay", "once", "--json"], { DATABASE_URL: t.url }), 2)).toEqual({
      code: "config",
      message: "QSTASH_TOKEN is not set; PUBLIC_URL is not set (environment or .env)",
    });
  });

  it("a bad id is invalid input (exit 2), an unknown one not found (exit 1)", async () => {
    expect(refusal(await runCli(["events", "show", "not-a-uuid", "--json"], env()), 2)).toEqual({
      code: "invalid_input",
      message: '"not-a-uuid" is not an event id (a UUID)',
    });
    // Said before anything needs the database or QStash, whatever the command.
    expect(refusal(await runCli(["job-failures", "retry", "abc", "--json"]), 2)).toEqual({
      code: "invalid_input",
      message: '"abc" is not a job failure id (a positive whole number)',
    });
    expect(refusal(await runCli(["webhooks", "delivery", "abc", "--json"]), 2)).toEqual({
      code: "invalid_input",
      message: '"abc" is not a webhook delivery id (a UUID)',
    });
    expect(refusal(await runCli(["events", "requeue", "nope", "--json"]), 2)).toEqual({
      code: "invalid_input",
      message: '"nope" is not an event id (a UUID)',
    });
    const id = "00000000-0000-4000-8000-000000000000";
    expect(refusal(await runCli(["events", "show", id, "--json"], env()), 1)).toEqual({
      code: "not_found",
      // A link from a job failure or a delivery outlives the event retention deleted.
      message: `no event ${id}: not recorded, or deleted by the cron sweep once fanned out more than RETENTION_DAYS ago (job failures, webhook deliveries and alerts may still name it)`,
    });
  });

  it("an unreachable database is a failure, exit 1, in the CLI's one line", async () => {
    const r = await runCli(["stats", "--json"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" });
    expect(refusal(r, 1)).toEqual({
      code: "failed",
      message: "cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running",
    });
  });

  it("a refused job-failure retry says why, with the domain's code, exit 1", async () => {
    const id = await insertJobFailure(t.pool);
    const first = await runCli(["job-failures", "retry", String(id), "--json"], env());
    expect(first.code).toBe(0);
    const { retriedAt, retryMessageId } = JSON.parse(first.stdout);

    const again = await runCli(["job-failures", "retry", String(id), "--json"], env());
    expect(refusal(again, 1)).toEqual({
      code: "already_retried",
      message: `job failure ${id} was already retried at ${retriedAt} as ${retryMessageId}`,
    });
    expect(refusal(await runCli(["job-failures", "retry", "424242", "--json"], env()), 1)).toMatchObject({
      code: "not_found",
      message: expect.stringMatching(/job failure 424242 not found/),
    });
    const foreign = await insertJobFailure(t.pool, { subscription: "https://elsewhere.example/hook" });
    const r = await runCli(["job-failures", "retry", String(foreign), "--json"], env());
    expect(refusal(r, 1)).toMatchObject({
      code: "not_retryable",
      message: expect.stringMatching(/is not one of this app's subscriptions/),
    });
  });

  it("a publish QStash refuses is publish_failed, exit 1, the failure left un-retried", async () => {
    const id = await insertJobFailure(t.pool);
    paused.qstash.failNextPublishes(1, 500);
    const one = await runCli(["job-failures", "retry", String(id), "--json"], env());
    expect(refusal(one, 1)).toMatchObject({
      code: "publish_failed",
      message: expect.stringMatching(/^QStash did not take the retry of job failure \d+ \(QStash 500: /),
    });
    paused.qstash.failNextPublishes(1, 500);
    const all = await runCli(["job-failures", "retry", "--all", "--json"], env());
    expect(refusal(all, 1)).toMatchObject({
      code: "publish_failed",
      message: expect.stringMatching(/^QStash did not take the retried jobs .*: try again$/),
    });
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("without --json the same refusals stay one line of text on stderr", async () => {
    const r = await runCli(["events", "show", "00000000-0000-4000-8000-000000000000"], env());
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(
      /^edge-outbox: no event 00000000-0000-4000-8000-000000000000: not recorded, or deleted by the cron sweep .*\n$/,
    );
    // A --json after `--` is a positional, not the option: the answer is text.
    const after = await runCli(["events", "requeue", "--", "--json"], env());
    expect(after.stdout).toBe("");
    expect(after.stderr).toMatch(/^edge-outbox: /);
  });
});

describe("run through npm, as the README says a script should", () => {
  it("`npm run -s outbox -- … --json` puts the JSON alone on stdout", async () => {
    const root = fileURLToPath(new URL("../..", import.meta.url));
    const answer = await new Promise<{ code: number | null; stdout: string }>((resolve, reject) => {
      const child = spawn(
        "npm",
        ["run", "-s", "outbox", "--", "events", "show", crypto.randomUUID(), "--json"],
        {
          cwd: root,
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", DATABASE_URL: t.url },
          stdio: ["ignore", "pipe", "ignore"],
        },
      );
      let stdout = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.on("error", reject);
      child.on("exit", (code) => resolve({ code, stdout }));
    });
    expect(answer.code).toBe(1);
    expect(JSON.parse(answer.stdout)).toMatchObject({ error: { code: "not_found" } });
  }, 30_000);
});
