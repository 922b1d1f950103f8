import { describe, expect, it } from "vitest";
import { expectUsageErrors, firstColumn, runCli } from "../support/cli.ts";
import { SUBSCRIPTION_NAMES } from "../../src/domain/subscriptions.ts";
import { useTestDatabase } from "../support/db.ts";
import { insertJobFailure, jobFailureRow, relayJobBody, usePausedQStash } from "../support/job-failures.ts";

// `job-failures list|retry` as an operator runs them, against the QStash dev server
// with delivery paused.
const t = useTestDatabase();
const paused = usePausedQStash(t);
const PUBLIC_URL = "http://127.0.0.1:8787";

const env = () => ({
  DATABASE_URL: t.url,
  QSTASH_URL: paused.qstash.url,
  QSTASH_TOKEN: paused.qstash.token,
  PUBLIC_URL,
});
const jobsInQStash = () => paused.qstash.messages().filter((m) => m.kind !== "failure-callback");

describe("outbox job-failures", () => {
  it("retries a failure once, and the list shows it", async () => {
    const body = relayJobBody("notify.mail");
    const id = await insertJobFailure(t.pool, { body, messageId: "msg_listed" });

    const retried = await runCli(["job-failures", "retry", String(id), "--json"], env());

    expect(retried.code).toBe(0);
    const answer = JSON.parse(retried.stdout);
    expect(answer).toEqual({
      id,
      retriedAt: expect.any(String),
      retryMessageId: expect.stringMatching(/^msg_/),
    });
    expect(jobsInQStash()).toEqual([
      expect.objectContaining({
        messageId: answer.retryMessageId,
        url: `${PUBLIC_URL}/jobs/notify.mail`,
        body,
      }),
    ]);

    const again = await runCli(["job-failures", "retry", String(id)], env());
    expect(again.code).toBe(1);
    expect(again.stderr.trim()).toBe(
      `edge-outbox: job failure ${id} was already retried at ${answer.retriedAt} as ${answer.retryMessageId}`,
    );
    expect(jobsInQStash()).toHaveLength(1);

    const listed = await runCli(["job-failures", "list"], { DATABASE_URL: t.url });
    expect(listed.code).toBe(0);
    const [header, line] = listed.stdout.trim().split("\n");
    expect(header).toMatch(/^ID\s+RECEIVED\s+SUBSCRIPTION\s+EVENT\s+LAST ANSWER\s+MESSAGE\s+RETRIED$/);
    // The subscriber's cause beside the route's own status, which names none.
    expect(line).toMatch(
      new RegExp(
        `^${id}\\s.*notify\\.mail\\s.*\\s500: mail API down\\s+msg_listed\\s+${answer.retriedAt} as ${answer.retryMessageId}, not delivered yet$`,
      ),
    );
  });

  it("list links a retry that failed again to the failure it retried", async () => {
    const id = await insertJobFailure(t.pool);
    const retried = JSON.parse((await runCli(["job-failures", "retry", String(id), "--json"], env())).stdout);
    const again = await insertJobFailure(t.pool, { messageId: retried.retryMessageId });
    const listed = await runCli(["job-failures", "list"], { DATABASE_URL: t.url });
    const lines = listed.stdout.trim().split("\n");
    expect(lines[1]).toMatch(new RegExp(`^${again} \\(retry of ${id}\\)\\s`));
    expect(lines[2]).toMatch(new RegExp(`^${id}\\s.* as ${retried.retryMessageId}, failed again: ${again}$`));
  });

  it("list shows a page at a time, says how to see older ones, and pages back with --before", async () => {
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) ids.push(await insertJobFailure(t.pool));
    const idsIn = (stdout: string) => firstColumn(stdout).map(Number);

    const first = await runCli(["job-failures", "list", "--limit", "2"], { DATABASE_URL: t.url });
    expect(first.code).toBe(0);
    expect(idsIn(first.stdout)).toEqual([ids[2], ids[1]]);
    const hint = /older ones: the same command with --before (\d+)$/.exec(first.stdout.trim());
    expect(Number(hint?.[1])).toBe(ids[1]);
    const older = await runCli(["job-failures", "list", "--limit", "2", "--before", hint![1]!], {
      DATABASE_URL: t.url,
    });
    expect(idsIn(older.stdout)).toEqual([ids[0]]);
    expect(older.stdout).not.toMatch(/older ones/);

    // --json is the page alone, the hint left out, so stdout parses.
    const json = await runCli(["job-failures", "list", "--limit", "1", "--json"], { DATABASE_URL: t.url });
    expect((JSON.parse(json.stdout) as { id: number }[]).map((f) => f.id)).toEqual([ids[2]]);
  });

  it("retry --all retries every failure not yet retried, once, and says how many", async () => {
    const ids = [await insertJobFailure(t.pool), await insertJobFailure(t.pool)];
    await insertJobFailure(t.pool, {
      subscription: "https://elsewhere.example/hook",
      body: relayJobBody("notify.mail"),
    });

    const all = await runCli(["job-failures", "retry", "--all"], env());

    expect(all.code).toBe(0);
    expect(all.stdout.trim()).toBe(`retried 2 job failures (ids ${ids[0]}–${ids[1]})`);
    expect(all.stderr).toContain("retried 2 so far…");
    expect(jobsInQStash()).toHaveLength(2);
    const again = await runCli(["job-failures", "retry", "--all", "--json"], env());
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({ retried: [] });
    expect(jobsInQStash()).toHaveLength(2);
  });

  it("list and retry --all of one subscription leave the others' failures alone", async () => {
    const mail = await insertJobFailure(t.pool, { subscription: "notify.mail" });
    const index = await insertJobFailure(t.pool, { subscription: "corpus.index" });
    const listed = await runCli(["job-failures", "list", "--subscription", "corpus.index", "--json"], env());
    expect((JSON.parse(listed.stdout) as { id: number }[]).map((f) => f.id)).toEqual([index]);

    const mailOnly = await runCli(["job-failures", "retry", "--all", "--subscription", "notify.mail"], env());

    expect(mailOnly.code).toBe(0);
    expect(mailOnly.stdout.trim()).toBe(`retried 1 job failure (ids ${mail}–${mail})`);
    expect(await jobFailureRow(t.pool, index)).toEqual({ retried_at: null, retry_message_id: null });
    const again = await runCli(["job-failures", "retry", "--all", "--subscription", "notify.mail"], env());
    expect(again.stdout.trim()).toBe("no job failure of notify.mail left to retry");
  });

  it("says why a failure cannot be retried, and exits 1", async () => {
    const foreign = await insertJobFailure(t.pool, { subscription: "https://elsewhere.example/hook" });
    const cases: [string, RegExp][] = [
      [String(foreign), /is not one of this app's subscriptions/],
      ["424242", /job failure 424242 not found/],
    ];
    for (const [id, message] of cases) {
      const r = await runCli(["job-failures", "retry", id], env());
      expect(r.code, id).toBe(1);
      expect(r.stderr, id).toMatch(message);
    }
    expect(jobsInQStash()).toHaveLength(0);
  });

  it("a publish QStash refuses exits 1 and leaves the failure un-retried", async () => {
    const id = await insertJobFailure(t.pool);
    paused.qstash.failNextPublishes(1, 500);
    const r = await runCli(["job-failures", "retry", String(id)], env());
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      /QStash did not take the retry of job failure \d+ \(QStash 500: .*\); the failure is left un-retried: try again/,
    );
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
  });

  it("checks the command line first, then the QStash variables", async () => {
    const cases: [string[], RegExp | string][] = [
      [["job-failures"], /job-failures needs a command: list or retry/],
      [["job-failures", "redo"], /unknown job-failures command "redo"/],
      [["job-failures", "retry"], /job-failures retry takes one job failure id/],
      [["job-failures", "retry", "1", "2"], /job-failures retry takes one job failure id/],
      [["job-failures", "list", "x"], /job-failures list takes no argument, got "x"/],
      [["job-failures", "retry", "--all", "5"], /job-failures retry --all takes no id/],
      [["job-failures", "list", "--before", "1.5"], /--before must be a positive integer, got "1.5"/],
      [
        ["job-failures", "retry", "--all", "--before", "5"],
        /--before is not an option of job-failures retry/,
      ],
      [
        ["job-failures", "list", "--subscription", "notify.mial"],
        // Every subscription named, whichever a team adds.
        `--subscription must name a subscription: ${SUBSCRIPTION_NAMES.join(", ")}, got "notify.mial"`,
      ],
      [
        ["job-failures", "retry", "5", "--subscription", "notify.mail"],
        /--subscription is for job-failures retry --all/,
      ],
    ];
    await expectUsageErrors(cases);
    const id = await insertJobFailure(t.pool);
    const noQStash = await runCli(["job-failures", "retry", String(id)], { DATABASE_URL: t.url });
    expect(noQStash.code).toBe(2);
    expect(noQStash.stderr).toMatch(/QSTASH_TOKEN is not set/);
    expect(await jobFailureRow(t.pool, id)).toEqual({ retried_at: null, retry_message_id: null });
    // Eleven CLI processes, ten of them at once: near the 30 s default on a loaded 2-core machine.
  }, 60_000);
});
