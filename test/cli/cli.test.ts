import { beforeEach, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/db.ts";
import { poisonEvents, seedEvents } from "../support/events.ts";
import { insertJobFailure, jobRanOutOfRetries, relayJobBody } from "../support/job-failures.ts";
import { resetOutbox } from "../support/relay.ts";
import { expectUsageErrors, firstColumn, runCli } from "../support/cli.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));
const env = () => ({ DATABASE_URL: t.url });

describe("outbox CLI", () => {
  it("answers bad arguments with usage and exit code 2", async () => {
    const [none, badState, badId, unknownFlag] = await Promise.all([
      runCli([], env()),
      runCli(["events", "list", "--state", "stuck"], env()),
      runCli(["events", "show", "not-a-uuid"], env()),
      runCli(["stats", "--verbose"], env()),
    ]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no command given/);
    expect(none.stderr).toMatch(/usage: npm run outbox/);
    expect(badState.code).toBe(2);
    expect(badState.stderr).toMatch(/--state must be pending, fanned or poisoned/);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toMatch(/"not-a-uuid" is not an event id/);
    expect(unknownFlag.code).toBe(2);
    expect(unknownFlag.stderr).toMatch(/^edge-outbox: --verbose is not an option\n/);
  });

  it("follows a wrong command line with that command's usage lines, and an unknown command with all", async () => {
    const [badLimit, badSub, unknown] = await Promise.all([
      runCli(["webhooks", "show", "--limit", "abc"]),
      runCli(["webhooks", "frob"]),
      runCli(["bogus"]),
    ]);
    // The one entry the mistake was about, under the usage's own heading: not 45 lines to search.
    expect(badLimit.code).toBe(2);
    expect(badLimit.stderr).toMatch(
      /usage: npm run outbox -- <command> \[options\]\n\n {2}webhooks show <endpoint-id>/,
    );
    expect(badLimit.stderr).not.toMatch(/webhooks list|events list|relay once|--batch-size/);
    expect(badLimit.stderr).toMatch(/--json +machine-readable output/);
    expect(badLimit.stderr).toMatch(/npm run outbox -- --help\n$/);
    // A sub-command it does not have: every webhooks entry, and no other command's.
    expect(badSub.stderr).toMatch(/webhooks list/);
    expect(badSub.stderr).toMatch(/webhooks enable\|disable <endpoint-id>\n {30,}turn an endpoint on/);
    expect(badSub.stderr).not.toMatch(/events list|alerts/);
    // No such command: the whole usage, environment included.
    expect(unknown.stderr).toMatch(/unknown command "bogus"/);
    expect(unknown.stderr).toMatch(
      /events list[\s\S]*webhooks list[\s\S]*api-keys revoke[\s\S]*environment \(or \.env\)/,
    );
  });

  it("refuses an option given twice instead of keeping the last", async () => {
    const [twice, thrice, json] = await Promise.all([
      runCli(["events", "list", "--type", "order.*", "--type", "invoice.*"]),
      runCli(["alerts", "--limit=1", "--limit", "2", "--limit", "3"]),
      runCli(["events", "list", "--type", "order.*", "--type", "invoice.*", "--json"]),
    ]);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toMatch(
      /^edge-outbox: --type was given 2 times \("order\.\*", "invoice\.\*"\); give it once\n/,
    );
    expect(thrice.stderr).toMatch(/--limit was given 3 times \("1", "2", "3"\)/);
    expect(json.code).toBe(2);
    expect(JSON.parse(json.stdout)).toEqual({
      error: { code: "usage", message: '--type was given 2 times ("order.*", "invoice.*"); give it once' },
    });
    // A flag said twice is still the one flag: nothing to choose between.
    const flags = await runCli(["stats", "--json", "--json"], env());
    expect(flags.code, flags.stderr).toBe(0);
    expect(JSON.parse(flags.stdout)).toHaveProperty("backlog");
  });

  it("checks the whole command line before the environment and the database", async () => {
    // No DATABASE_URL at all: a mistyped command must hear about its mistake, not about that.
    const cases: [string[], RegExp][] = [
      [["bogus"], /unknown command "bogus"/],
      [["events"], /events needs a command: list, show or requeue/],
      [["events", "frob"], /unknown events command "frob"/],
      [["events", "list", "--limit", "abc"], /--limit must be an integer from 1 to 10000, got "abc"/],
      [["events", "list", "--limit", "100000"], /--limit must be an integer from 1 to 10000, got "100000"/],
      [["events", "list", "--limit", "1e3"], /--limit must be an integer from 1 to 10000, got "1e3"/],
      [["events", "list", "extra"], /events list takes no argument, got "extra"/],
      [["events", "list", "--type", "Bad Type"], /--type must be an event-type glob: .*, got "Bad Type"/],
      [["events", "show"], /events show takes one event id/],
      [["events", "requeue"], /events requeue takes one or more event ids, or --all/],
      [
        ["events", "requeue", "--all", "00000000-0000-4000-8000-000000000000"],
        /events requeue --all takes no id/,
      ],
      [
        ["events", "requeue", "--all", "--type", "Bad Type"],
        /--type must be an event-type glob: .*, got "Bad Type"/,
      ],
      [
        ["events", "requeue", "00000000-0000-4000-8000-000000000000", "--type", "supplier.*"],
        /events requeue --type goes with --all, not with ids/,
      ],
      [["relay"], /relay needs a command: once or drain/],
      [["relay", "drain", "--budget", "0"], /--budget must be a positive integer, got "0"/],
      [["relay", "once", "--budget", "5"], /--budget is for relay drain/],
      [["migrate", "now"], /migrate takes no argument, got "now"/],
      [["stats", "x"], /stats takes no argument, got "x"/],
      // An option another command reads is refused, not ignored.
      [["events", "list", "--status", "failed"], /--status is not an option of events list/],
      [
        ["events", "show", "00000000-0000-4000-8000-000000000000", "--limit", "5"],
        /--limit is not an option of events show/,
      ],
      [["job-failures", "list", "--all"], /--all is not an option of job-failures list/],
      [["alerts", "--kind", "relay.failing"], /--kind is not an option of alerts/],
      [["stats", "--open"], /--open is not an option of stats/],
    ];
    const results = await expectUsageErrors(cases);
    results.forEach((r, i) =>
      expect(r.stderr, cases[i]![0].join(" ")).not.toMatch(/DATABASE_URL is not set/),
    );
    // A right command line without the variable: then it is named, in one line.
    const stats = await runCli(["stats"]);
    expect(stats.code).toBe(2);
    expect(stats.stderr.trim()).toBe("edge-outbox: DATABASE_URL is not set (environment or .env)");
    // Twenty Node processes started at once, each loading tsx: 15–20 s of CPU on two
    // cores, so the default 30 s was met only when nothing else ran (twice timed out
    // beside other suites).
  }, 120_000);

  it("says in one line when the database cannot be reached", async () => {
    const r = await runCli(["stats"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" });
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toBe(
      "edge-outbox: cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running",
    );
  });

  it("lists, shows and counts events, as text and as JSON", async () => {
    const [first, second] = await seedEvents(t.pool, 2, { type: "supplier.connected" });
    await seedEvents(t.pool, 1, { type: "corpus.note.created" });
    await t.pool.query(
      `UPDATE events SET poisoned_at = now(), attempts = 5, last_error = 'boom' WHERE id = $1`,
      [second],
    );

    const stats = await runCli(["stats", "--json"], env());
    expect(stats.code).toBe(0);
    expect(JSON.parse(stats.stdout)).toMatchObject({ backlog: 2, poisoned: 1, relay: { failures: 0 } });

    const list = await runCli(["events", "list", "--type", "supplier.*", "--json"], env());
    expect(JSON.parse(list.stdout).map((e: { id: string }) => e.id)).toEqual([second, first]);

    const poisoned = await runCli(["events", "list", "--state", "poisoned"], env());
    expect(poisoned.stdout).toMatch(/^SEQ\s+ID\s+TYPE/);
    expect(poisoned.stdout).toContain(second);
    expect(poisoned.stdout).not.toContain(first);

    const show = await runCli(["events", "show", second!], env());
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/state\s+poisoned/);
    expect(show.stdout).toMatch(/last error boom$/m);
    // Requeued and fanned out since, its error is an earlier try's, and says so.
    await t.pool.query(
      `UPDATE events SET poisoned_at = NULL, fanned_out_at = now(), fanout = '{}' WHERE id = $1`,
      [second],
    );
    expect((await runCli(["events", "show", second!], env())).stdout).toMatch(
      /^ {2}last error boom \(an earlier try; it was fanned out since\)$/m,
    );

    const missing = await runCli(["events", "show", "00000000-0000-0000-0000-000000000000"], env());
    expect(missing.code).toBe(1);
  });

  it("stats says how large the database is and which tables fill it", async () => {
    await seedEvents(t.pool, 2_000, { payloadBytes: 500 });
    const text = (await runCli(["stats"], env())).stdout;
    expect(text).toMatch(/^database {11}\d+(\.\d)? MB; the largest tables: events \d+(\.\d)? MB, /m);
    const json = JSON.parse((await runCli(["stats", "--json"], env())).stdout);
    const { rows } = await t.pool.query<{ bytes: string }>(
      "SELECT pg_total_relation_size('events')::text AS bytes",
    );
    expect(json.storage.largest[0]).toEqual({ table: "events", bytes: Number(rows[0]!.bytes) });
    expect(json.storage.bytes).toBeGreaterThan(json.storage.largest[0].bytes);
    expect(json.storage.largest).toHaveLength(3);
  });

  it("stats says how many failed jobs wait for QStash's retry, per subscription, and when", async () => {
    // After a provider came back, stats said nothing waited while 79 of 607 mails
    // waited for QStash's next retry (the alert walkthrough).
    expect((await runCli(["stats"], env())).stdout).toMatch(/^retries due {8}none$/m);
    await t.pool.query(
      `INSERT INTO job_retries_due (message_id, subscription, due_at)
       VALUES ('msg-a', 'notify.mail', '2026-12-06T12:30:00Z'), ('msg-b', 'notify.mail', '2026-12-06T18:00:00Z'),
              ('msg-c', 'corpus.index', '2026-12-06T12:05:00Z')`,
    );
    expect((await runCli(["stats"], env())).stdout).toMatch(
      new RegExp(
        "^retries due {8}corpus\\.index 1 job, expected by 2026-12-06T12:05:00\\.000Z; " +
          "notify\\.mail 2 jobs, the next expected by 2026-12-06T12:30:00\\.000Z, the last by 2026-12-06T18:00:00\\.000Z " +
          "\\(QStash retries them; job-failures lists those that run out\\)$",
        "m",
      ),
    );
    const json = JSON.parse((await runCli(["stats", "--json"], env())).stdout);
    expect(json.jobRetriesDue).toEqual([
      {
        subscription: "corpus.index",
        jobs: 1,
        nextDueAt: "2026-12-06T12:05:00.000Z",
        lastDueAt: "2026-12-06T12:05:00.000Z",
      },
      {
        subscription: "notify.mail",
        jobs: 2,
        nextDueAt: "2026-12-06T12:30:00.000Z",
        lastDueAt: "2026-12-06T18:00:00.000Z",
      },
    ]);
  });

  it("stats says what QStash holds behind each subscription's limit, as the sweep last read it", async () => {
    const before = await runCli(["stats"], env());
    expect(before.stdout).toMatch(
      /^waiting in QStash {2}not read yet \(the cron sweep reads it each minute\)$/m,
    );
    await t.pool.query(
      `INSERT INTO subscription_wait_lists
              (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('webhook.fanout', 930, 10, 10, false, '2026-12-06T12:00:00Z', '2026-12-06T12:20:00Z'),
              ('notify.mail', 0, 10, 0, false, NULL, '2026-12-06T12:20:00Z')`,
    );
    const text = await runCli(["stats"], env());
    expect(text.stdout).toMatch(
      /^waiting in QStash {2}webhook\.fanout 930 waiting at every reading since 2026-12-06T12:00:00\.000Z; read by the sweep at 2026-12-06T12:20:00\.000Z$/m,
    );
    // QStash out of reach since: the reading is that old, and it says so first.
    await t.pool.query(
      "UPDATE subscription_wait_lists SET unread_since = '2026-12-06T12:21:00Z', unread_error = 'fetch failed (ECONNREFUSED)'",
    );
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^waiting in QStash {2}not read since 2026-12-06T12:21:00\.000Z \(fetch failed \(ECONNREFUSED\)\); the last reading: webhook\.fanout 930 waiting/m,
    );
    const json = JSON.parse((await runCli(["stats", "--json"], env())).stdout);
    expect(json.waitLists).toEqual([
      expect.objectContaining({ subscription: "notify.mail", waiting: 0, waitingSince: null }),
      expect.objectContaining({
        subscription: "webhook.fanout",
        waiting: 930,
        parallelism: 10,
        inFlight: 10,
      }),
    ]);
  });

  it("stats says when the cron sweep last finished and its retention, or that none has lately", async () => {
    await t.pool.query("TRUNCATE sweep_runs");
    // Nothing raises an alert for a sweep that does not run (ADR 0040): stats says it.
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^cron sweep {9}No cron sweep has finished yet\. Until one does, lost kicks are not repaired, .*check the Worker's cron trigger/m,
    );
    await t.pool.query(
      `INSERT INTO sweep_runs (finished_at, duration_ms, retention_days) VALUES (date_trunc('second', now()), 41, 14)`,
    );
    const { rows } = await t.pool.query("SELECT finished_at FROM sweep_runs");
    const at = (rows[0] as { finished_at: Date }).finished_at.toISOString();
    expect((await runCli(["stats"], env())).stdout).toMatch(
      new RegExp(
        `^cron sweep {9}finished ${at.replaceAll(".", "\\.")} in 41 ms; what has finished \\(.*\\) is deleted after 14 days \\(RETENTION_DAYS\\)$`,
        "m",
      ),
    );
    await t.pool.query(
      `UPDATE sweep_runs SET failed_at = now(), failure = 'in its "dead letters" step: QStash answered 401'`,
    );
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^cron sweep {9}The last sweep failed at \S+ in its "dead letters" step: QStash answered 401; the one before finished at \S+, and the next one tries again\.$/m,
    );
    // --json (and GET /admin/stats) carries the reading with the record, not the row's id.
    const sweep = JSON.parse((await runCli(["stats", "--json"], env())).stdout).sweep;
    expect(sweep).toEqual({
      finishedAt: at,
      durationMs: 41,
      retentionDays: 14,
      failedAt: expect.any(String),
      failure: 'in its "dead letters" step: QStash answered 401',
      cron: null,
      late: false,
      trouble: expect.stringMatching(/^The last sweep failed at /),
    });
    await t.pool.query("UPDATE sweep_runs SET finished_at = now() - interval '6 minutes'");
    expect(JSON.parse((await runCli(["stats", "--json"], env())).stdout).sweep).toMatchObject({
      late: true,
      trouble: expect.stringMatching(/^No cron sweep has finished since /),
    });
  });

  it("stats says whether QStash's jobs reach the Worker, as the sweep's canaries say (ADR 0045)", async () => {
    await t.pool.query("TRUNCATE qstash_canaries");
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^jobs from QStash {3}no canary sent yet: the cron sweep sends one every 30 min, to tell whether jobs reach this Worker$/m,
    );
    await t.pool.query(
      `INSERT INTO qstash_canaries (id, sent_at, arrived_at) VALUES
         (gen_random_uuid(), '2026-12-07 11:30:00Z', '2026-12-07 11:30:01Z'),
         (gen_random_uuid(), now() - interval '20 minutes', NULL),
         (gen_random_uuid(), now() - interval '15 minutes', NULL)`,
    );
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^jobs from QStash {3}NOT ARRIVING: no canary the cron sweep sent through QStash since \S+ has reached this Worker, and the last to arrive did at 2026-12-07T11:30:01\.000Z \(the jobs\.not_arriving alert says why, as far as QStash knows\)$/m,
    );
    expect(JSON.parse((await runCli(["stats", "--json"], env())).stdout).canary).toEqual({
      lastArrivedAt: "2026-12-07T11:30:01.000Z",
      waitingSince: expect.any(String),
      late: true,
      foreignLabels: 0,
      text: expect.stringMatching(/^NOT ARRIVING: /),
    });
    await t.pool.query("TRUNCATE qstash_canaries");
  });

  it("finds one subject's events, or one scope's, a page at a time with --before", async () => {
    const note = "0193a6f0-note-of-interest";
    const mine = await seedEvents(t.pool, 3, {
      type: "corpus.note.changed",
      subject: () => note,
      scope: "acme",
    });
    await seedEvents(t.pool, 4, { type: "corpus.note.changed", scope: "acme" });
    await seedEvents(t.pool, 2, { type: "corpus.note.changed", subject: () => note, scope: "globex" });
    const ids = (r: { stdout: string }) => (JSON.parse(r.stdout) as { id: string }[]).map((e) => e.id);

    const subject = await runCli(["events", "list", "--subject", note, "--scope", "acme", "--json"], env());
    expect(ids(subject)).toEqual([...mine].reverse());
    expect(ids(await runCli(["events", "list", "--scope", "acme", "--json"], env()))).toHaveLength(7);

    const first = await runCli(
      ["events", "list", "--subject", note, "--scope", "acme", "--limit", "2"],
      env(),
    );
    const hint = /older ones: the same command with --before (\d+)$/.exec(first.stdout.trim());
    expect(hint).not.toBeNull();
    expect(first.stdout).toContain(mine[2]!);
    expect(first.stdout).toContain(mine[1]!);
    const older = await runCli(
      ["events", "list", "--subject", note, "--scope", "acme", "--limit", "2", "--before", hint![1]!],
      env(),
    );
    expect(older.stdout).toContain(mine[0]!);
    expect(older.stdout).not.toMatch(/older ones/);

    // --unscoped: the events without a scope, not everyone's.
    const unscoped = await seedEvents(t.pool, 2, { type: "corpus.note.changed", subject: () => note });
    const none = await runCli(["events", "list", "--subject", note, "--unscoped", "--json"], env());
    expect(ids(none)).toEqual([...unscoped].reverse());

    await expectUsageErrors([
      [["events", "list", "--before", "0"], /--before must be a positive integer, got "0"/],
      [["events", "list", "--subject", "a\nb"], /--subject must be one line of 1 to 200 characters/],
      // A scope is at most 128 characters wherever it is written.
      [["events", "list", "--scope", "s".repeat(129)], /--scope must be one line of 1 to 128 characters/],
      [["events", "list", "--scope", "acme", "--unscoped"], /takes --scope <scope> or --unscoped, not both/],
    ]);
  });

  it("shows a large payload's first characters, and --json all of it", async () => {
    const [id] = await seedEvents(t.pool, 1, { payloadBytes: 50_000 });
    const text = await runCli(["events", "show", id!], env());
    expect(text.code).toBe(0);
    const line = text.stdout.split("\n").find((l) => l.startsWith("  payload"))!;
    expect(line).toMatch(/… \(50016 characters in all; --json prints it whole\)$/);
    expect(line.length).toBeLessThan(2100);
    const json = await runCli(["events", "show", id!, "--json"], env());
    expect(JSON.parse(json.stdout).payload.pad).toHaveLength(50_000);
  });

  it("prints the whole of a long answer into a pipe before it exits", async () => {
    // A pipe takes 64 KiB at a time: the rest waited in the process, and exiting at
    // once cut `events list --json | jq` off mid-string, with exit code 0.
    const [id] = await seedEvents(t.pool, 1, { payloadBytes: 300_000 });
    await seedEvents(t.pool, 400, { payloadBytes: 500 });
    const show = await runCli(["events", "show", id!, "--json"], env());
    expect(show.code).toBe(0);
    expect(JSON.parse(show.stdout).payload.pad).toHaveLength(300_000);
    const list = await runCli(["events", "list", "--limit", "401", "--json"], env());
    expect(list.stdout.length).toBeGreaterThan(200_000);
    expect(JSON.parse(list.stdout)).toHaveLength(401);
    const text = await runCli(["events", "list", "--limit", "401"], env());
    expect(firstColumn(text.stdout)).toHaveLength(401);
  });

  it("shows an event's own failed jobs and whether each was retried", async () => {
    const [id] = await seedEvents(t.pool, 1, { fanned: true });
    const failure = await insertJobFailure(t.pool, { body: relayJobBody("notify.mail", { id }) });
    const retried = await insertJobFailure(t.pool, {
      subscription: "corpus.index",
      body: relayJobBody("corpus.index", { id }),
    });
    await t.pool.query(
      "UPDATE job_failures SET retried_at = '2026-12-06T10:00:00Z', retry_message_id = 'msg_again' WHERE id = $1",
      [retried],
    );
    const text = await runCli(["events", "show", id!], env());
    const lines = text.stdout.split("\n").filter((l) => l.startsWith("  failed job"));
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(
          `^  failed job ${retried} corpus\\.index .*: 500: mail API down; retried 2026-12-06T10:00:00\\.000Z as msg_again, not delivered yet$`,
        ),
      ),
      expect.stringMatching(
        new RegExp(
          `^  failed job ${failure} notify\\.mail .*: 500: mail API down; not retried \\(job-failures retry ${failure}\\)$`,
        ),
      ),
    ]);
    const json = JSON.parse((await runCli(["events", "show", id!, "--json"], env())).stdout);
    expect(json.jobFailures.map((f: { id: number }) => f.id)).toEqual([retried, failure]);
  });

  it("says whether each of an event's alerts is resolved, as --json does", async () => {
    const [id] = await seedEvents(t.pool, 1);
    await t.pool.query("UPDATE events SET created_at = '2026-12-05T07:00:00Z' WHERE id = $1", [id]);
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, event_id, message, created_at, resolved_at) VALUES
         ('event.poisoned', $1, 'poisoned after 5 attempts: boom', '2026-12-05T08:00:00Z', '2026-12-05T09:30:00Z'),
         ('webhook.delivery_failed', $1, 'gave up after 8 attempts', '2026-12-05T08:10:00Z', NULL)`,
      [id],
    );
    const show = await runCli(["events", "show", id!], env());
    expect(show.code).toBe(0);
    const alerts = show.stdout.split("\n").filter((l) => l.startsWith("  alert"));
    expect(alerts).toEqual([
      expect.stringMatching(
        /^ {2}alert {6}\d+ 2026-12-05T08:00:00\.000Z event\.poisoned \(resolved 2026-12-05T09:30:00\.000Z\): poisoned after 5 attempts: boom$/,
      ),
      expect.stringMatching(
        /^ {2}alert {6}\d+ 2026-12-05T08:10:00\.000Z webhook\.delivery_failed \(open\): gave up after 8 attempts$/,
      ),
    ]);
    const json = JSON.parse((await runCli(["events", "show", id!, "--json"], env())).stdout);
    expect(json.alerts.map((a: { resolvedAt: string | null }) => a.resolvedAt)).toEqual([
      "2026-12-05T09:30:00.000Z",
      null,
    ]);
    // One an upgrade merged into another was not resolved by anyone, and says so, as
    // the alerts list does.
    const [poisoned, open] = json.alerts.map((a: { id: number }) => a.id);
    await t.pool.query(
      `UPDATE outbox_alerts SET details = jsonb_build_object('mergedInto', $2::bigint) WHERE id = $1`,
      [poisoned, open],
    );
    expect((await runCli(["events", "show", id!], env())).stdout).toContain(
      `event.poisoned (resolved 2026-12-05T09:30:00.000Z, merged into alert ${open} by an upgrade): poisoned after 5 attempts: boom`,
    );
  });

  it("shows the open job.failed alert that counts an earlier event's failed job under a later one", async () => {
    // One alert per subscription names only its latest event (ADR 0037): the earlier
    // event's show listed no alert at all while its failure was counted.
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = now() WHERE resolved_at IS NULL");
    const [earlier, later] = await seedEvents(t.pool, 2, { fanned: true });
    for (const id of [earlier, later]) await jobRanOutOfRetries(t, "notify.mail", id!);
    const { rows } = await t.pool.query(
      "SELECT id::int FROM outbox_alerts WHERE kind = 'job.failed' AND resolved_at IS NULL",
    );
    const alertId: number = rows[0].id;
    const first = (await runCli(["events", "show", earlier!], env())).stdout.split("\n");
    const at = first.findIndex((l) => l.startsWith(`  alert      ${alertId} `));
    expect(first[at]).toContain("job.failed (open): 2 jobs for notify.mail ran out of retries");
    expect(first[at + 1]).toBe("             (counts this event's failed job; it names the latest)");
    const json = JSON.parse((await runCli(["events", "show", earlier!, "--json"], env())).stdout);
    expect(json.alerts).toEqual([]);
    expect(json.countingAlerts.map((a: { id: number }) => a.id)).toEqual([alertId]);
    // The event it names lists it once, as its own.
    const last = JSON.parse((await runCli(["events", "show", later!, "--json"], env())).stdout);
    expect(last.alerts.map((a: { id: number }) => a.id)).toEqual([alertId]);
    expect(last.countingAlerts).toEqual([]);
  });

  it("resolves one alert by id, or every open one of a kind, and says when there was nothing to do", async () => {
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO outbox_alerts (kind, message, resolved_at) VALUES
         ('event.poisoned', 'poisoned A', NULL),
         ('event.poisoned', 'poisoned B', NULL),
         ('relay.failing', 'relay failing', NULL),
         ('event.poisoned', 'poisoned C, seen before', '2026-12-05T09:00:00Z')
       RETURNING id`,
    );
    const [a, , failing, seen] = rows.map((r) => r.id);
    const open = async () =>
      (
        await t.pool.query("SELECT message FROM outbox_alerts WHERE resolved_at IS NULL ORDER BY id")
      ).rows.map((r) => r.message);

    const one = await runCli(["alerts", "resolve", a!], env());
    expect(one.stdout.trim()).toBe(`resolved alert ${a} (event.poisoned)`);
    expect(await open()).toEqual(["poisoned B", "relay failing"]);
    const again = await runCli(["alerts", "resolve", seen!, "--json"], env());
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({
      id: Number(seen),
      kind: "event.poisoned",
      resolved: false,
      resolvedAt: "2026-12-05T09:00:00.000Z",
    });
    expect((await runCli(["alerts", "resolve", seen!], env())).stdout.trim()).toBe(
      `alert ${seen} was already resolved at 2026-12-05T09:00:00.000Z`,
    );

    const kind = await runCli(["alerts", "resolve", "--kind", "event.poisoned"], env());
    expect(kind.stdout.trim()).toBe("resolved 1 event.poisoned alert");
    expect(await open()).toEqual(["relay failing"]);
    const none = await runCli(["alerts", "resolve", "--kind", "event.poisoned", "--json"], env());
    expect(JSON.parse(none.stdout)).toEqual({ kind: "event.poisoned", resolved: 0 });
    expect(await open()).toEqual(["relay failing"]);
    // A kind with none open resolves nothing and says which kinds are open; a kind
    // that is none exits 2, as any mistyped input, so a script can tell them apart.
    const noneOpen = await runCli(["alerts", "resolve", "--kind", "relay.lagging"], env());
    expect([noneOpen.code, noneOpen.stdout.trim()]).toEqual([
      0,
      "no open relay.lagging alert; open ones: relay.failing (1)",
    ]);
    // The sweep checks what a relay.failing alert reports each time: resolving it is not
    // fixing it, and the operator hears so, by id or by kind.
    const sweepChecked = await runCli(["alerts", "resolve", failing!], env());
    expect(sweepChecked.stdout.trim()).toBe(
      `resolved alert ${failing} (relay.failing); while what it reports lasts, the next sweep raises it again`,
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = NULL WHERE id = $1", [failing]);
    expect((await runCli(["alerts", "resolve", "--kind", "relay.failing"], env())).stdout.trim()).toBe(
      "resolved 1 relay.failing alert; while what it reports lasts, the next sweep raises it again",
    );
    await t.pool.query("UPDATE outbox_alerts SET resolved_at = NULL WHERE id = $1", [failing]);
    const typo = await runCli(["alerts", "resolve", "--kind", "relay.faling", "--json"], env());
    expect(typo.code).toBe(2);
    expect(typo.stdout + typo.stderr).toMatch(
      /--kind must be an alert kind: event\.poisoned, .*got \\?"relay\.faling\\?"/,
    );
    expect((await runCli(["alerts", "--open", "--json"], env())).stdout).toContain(`"id": ${failing}`);

    const unknown = await runCli(["alerts", "resolve", "999999", "--json"], env());
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stdout)).toEqual({ error: { code: "not_found", message: "no alert 999999" } });
    // 2^53 + 1 is not a JS number: refused, never rounded to the alert at 2^53.
    await t.pool.query(
      `INSERT INTO outbox_alerts (id, kind, message) OVERRIDING SYSTEM VALUE VALUES (9007199254740992, 'event.poisoned', 'at 2^53')`,
    );
    const inexact = await runCli(["alerts", "resolve", "9007199254740993", "--json"], env());
    expect(inexact.code).toBe(2);
    expect(JSON.parse(inexact.stdout).error.code).toBe("invalid_input");
    expect(await open()).toContain("at 2^53");
    const malformed = await runCli(["alerts", "resolve", "first", "--json"]);
    expect(malformed.code).toBe(2);
    expect(JSON.parse(malformed.stdout).error).toEqual({
      code: "invalid_input",
      message: '"first" is not an alert id (a positive whole number)',
    });
    // 0 is a whole number: the message said it was not one.
    const zero = await runCli(["alerts", "resolve", "0", "--json"]);
    expect(JSON.parse(zero.stdout).error.message).toBe('"0" is not an alert id (a positive whole number)');
    await expectUsageErrors([
      [["alerts", "resolve"], /alerts resolve takes one alert id, or --kind <kind>/],
      [["alerts", "resolve", "1", "--kind", "relay.failing"], /an alert id or --kind <kind>, not both/],
      [["alerts", "mute"], /alerts takes no argument but resolve, got "mute"/],
    ]);
    // A dozen CLI processes one after another: about 25 s on a loaded 2-core machine.
  }, 60_000);

  it("lists alerts a page at a time, says how to see older ones, and pages back with --before", async () => {
    const { rows } = await t.pool.query<{ id: string }>(
      `INSERT INTO outbox_alerts (kind, message, resolved_at)
       SELECT 'event.poisoned', 'alert ' || n, CASE WHEN n = 2 THEN now() END
         FROM generate_series(1, 5) AS n
       RETURNING id`,
    );
    const ids = rows.map((r) => r.id);
    const idsIn = firstColumn;

    const first = await runCli(["alerts", "--limit", "2"], env());
    expect(first.code).toBe(0);
    expect(idsIn(first.stdout)).toEqual([ids[4], ids[3]]);
    const hint = /older ones: the same command with --before (\d+)$/.exec(first.stdout.trim());
    expect(hint?.[1]).toBe(ids[3]);
    const second = await runCli(["alerts", "--limit", "2", "--before", hint![1]!], env());
    expect(idsIn(second.stdout)).toEqual([ids[2], ids[1]]);
    const last = await runCli(["alerts", "--limit", "2", "--before", ids[1]!], env());
    expect(idsIn(last.stdout)).toEqual([ids[0]]);
    expect(last.stdout).not.toMatch(/older ones/);
    // The default page is 50: the hint is what says more exist.
    expect((await runCli(["alerts"], env())).stdout).not.toMatch(/older ones/);
    // One an upgrade merged into another says so beside when it was resolved.
    await t.pool.query(
      `UPDATE outbox_alerts SET details = jsonb_build_object('mergedInto', $2::bigint) WHERE id = $1`,
      [ids[1], ids[4]],
    );
    expect((await runCli(["alerts"], env())).stdout).toMatch(
      new RegExp(
        `^${ids[1]}\\s+event\\.poisoned\\s+-\\s+\\S+\\s+\\S+ \\(merged into ${ids[4]}\\)\\s+alert 2$`,
        "m",
      ),
    );

    // --open keeps to open alerts on every page (the second one is resolved).
    const open = await runCli(["alerts", "--open", "--limit", "2", "--before", ids[3]!], env());
    expect(idsIn(open.stdout)).toEqual([ids[2], ids[0]]);
    expect(open.stdout).not.toMatch(/older ones/);

    // --json is the page alone, the hint left out, so stdout parses.
    const json = await runCli(["alerts", "--limit", "2", "--before", ids[4]!, "--json"], env());
    expect((JSON.parse(json.stdout) as { id: number }[]).map((a) => a.id)).toEqual(
      [ids[3], ids[2]].map(Number),
    );

    await expectUsageErrors([
      [["alerts", "--before", "0"], /--before must be a positive integer, got "0"/],
      [["alerts", "--before", "x"], /--before must be a positive integer, got "x"/],
      [["alerts", "resolve", "1", "--before", "5"], /--before is not an option of alerts resolve/],
    ]);
    expect((await runCli(["--help"])).stdout).toMatch(/alerts \[--open\] \[--limit <n>\] \[--before <id>\]/);
    // A dozen CLI processes one after another: about 25 s on a loaded 2-core machine.
  }, 60_000);

  it("says a backoff that has run out is over, and a poisoned event has no next attempt", async () => {
    await t.pool.query(
      `UPDATE outbox_relay_state SET failures = 3, backoff_until = now() - interval '2 minutes',
              last_error = 'QStash unreachable', last_failure_at = now() - interval '3 minutes'`,
    );
    const over = await runCli(["stats"], env());
    expect(over.stdout).toMatch(
      /relay\s+failing \(3 failed passes in a row; the next pass may run now\): QStash unreachable/,
    );
    await t.pool.query(`UPDATE outbox_relay_state SET backoff_until = now() + interval '5 minutes'`);
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /relay\s+backing off after 3 failed passes until /,
    );
    // One is a pass, not "1 failed passes".
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 1`);
    expect((await runCli(["stats"], env())).stdout).toMatch(/relay\s+backing off after 1 failed pass until /);
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 3`);

    const [id] = await seedEvents(t.pool, 1);
    await t.pool.query(
      `UPDATE events SET poisoned_at = now(), attempts = 5, next_attempt_at = now() + interval '1 hour', last_error = 'boom'
        WHERE id = $1`,
      [id],
    );
    const show = await runCli(["events", "show", id!], env());
    expect(show.stdout).toMatch(
      new RegExp(`attempts\\s+5 to fan out, no further attempts until requeued \\(events requeue ${id}\\)`),
    );
    expect(show.stdout).not.toMatch(/, next /);
    // stats names where to look and what fixes it, as it does for job failures.
    expect((await runCli(["stats"], env())).stdout).toMatch(
      /^poisoned\s+1 \(events list --state poisoned shows why; events requeue --all sends them again\)$/m,
    );
  });

  it("requeues poisoned events and reports the others", async () => {
    const [poisoned, pending] = await seedEvents(t.pool, 2);
    await t.pool.query(`UPDATE events SET poisoned_at = now(), attempts = 5 WHERE id = $1`, [poisoned]);
    const unknown = "00000000-0000-4000-8000-000000000000";
    const r = await runCli(["events", "requeue", poisoned!, pending!, unknown, "--json"], env());
    expect(JSON.parse(r.stdout)).toEqual({
      requeued: [poisoned],
      notPoisoned: [pending],
      unknown: [unknown],
    });
    expect(r.code).toBe(1);
    const { rows } = await t.pool.query(`SELECT poisoned_at, attempts FROM events WHERE id = $1`, [poisoned]);
    expect(rows[0]).toEqual({ poisoned_at: null, attempts: 0 });
  });

  it("requeues every poisoned event, of a type or all, a thousand at a time with progress", async () => {
    const suppliers = await seedEvents(t.pool, 1_500, { type: "supplier.connected" });
    const notes = await seedEvents(t.pool, 3, { type: "corpus.note.created" });
    const [pending] = await seedEvents(t.pool, 1, { type: "supplier.connected" });
    await poisonEvents(t.pool, [...suppliers, ...notes], new Date(Date.now() - 60_000).toISOString());
    // A pending row in its own backoff: a requeue must not reset it.
    await t.pool.query(
      `UPDATE events SET attempts = 2, next_attempt_at = now() + interval '1 minute' WHERE id = $1`,
      [pending],
    );
    const typed = await runCli(["events", "requeue", "--all", "--type", "supplier.*"], env());
    expect(typed.stderr).toBe("requeued 1000 of 1500…\n");
    expect(typed.stdout).toMatch(
      /^requeued 1500 poisoned supplier\.\* events \(poisoned up to .+\); the relay fans them out on its next pass\n$/,
    );
    expect(typed.code).toBe(0);
    const counts = async () =>
      (
        await t.pool.query(
          `SELECT type, count(*) FILTER (WHERE poisoned_at IS NOT NULL)::int AS poisoned,
                  count(*) FILTER (WHERE poisoned_at IS NULL AND attempts = 0)::int AS back
             FROM events GROUP BY type ORDER BY type`,
        )
      ).rows;
    expect(await counts()).toEqual([
      { type: "corpus.note.created", poisoned: 3, back: 0 },
      { type: "supplier.connected", poisoned: 0, back: 1_500 },
    ]);

    const all = await runCli(["events", "requeue", "--all", "--json"], env());
    const answer = JSON.parse(all.stdout);
    expect(answer).toEqual({ requeued: 3, upTo: expect.any(String) });
    // The database's clock, to the microsecond: a row poisoned after it is not taken.
    expect(Date.parse(answer.upTo)).toBeGreaterThan(Date.now() - 60_000);
    expect(all.stderr).toBe("");
    expect(await counts()).toEqual([
      { type: "corpus.note.created", poisoned: 0, back: 3 },
      { type: "supplier.connected", poisoned: 0, back: 1_500 },
    ]);
    const none = await runCli(["events", "requeue", "--all"], env());
    expect(none.stdout).toBe("no poisoned event to requeue\n");
    expect(none.code).toBe(0);
    const { rows } = await t.pool.query(`SELECT attempts FROM events WHERE id = $1`, [pending]);
    expect(rows[0].attempts).toBe(2);
  });

  it("migrate is idempotent on an up-to-date database", async () => {
    const r = await runCli(["migrate"], env());
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    // It said "migrations applied" whether it applied any or not.
    expect(r.stdout.trim()).toMatch(/^nothing to apply: all \d+ migrations were applied already$/);
    const json = JSON.parse((await runCli(["migrate", "--json"], env())).stdout);
    expect(json).toEqual({ migrated: true, applied: 0, total: expect.any(Number) });
  });

  it("relay once with a QStash it cannot reach runs no pass, and leaves the shared relay state alone", async () => {
    await seedEvents(t.pool, 3, { type: "supplier.connected" });
    const r = await runCli(["relay", "once"], {
      ...env(),
      QSTASH_URL: "http://127.0.0.1:1",
      QSTASH_TOKEN: "t",
      PUBLIC_URL: "http://127.0.0.1:8787",
    });
    expect(r.code).toBe(1);
    // Our line alone, with fetch's cause (the SDK printed a line of its own before it).
    expect(r.stderr.trim()).toMatch(
      /^edge-outbox: QStash at http:\/\/127\.0\.0\.1:1 did not take this terminal's request \(fetch failed \(.+\)\): check QSTASH_URL and QSTASH_TOKEN; no pass ran, and the relay's shared state is as it was$/,
    );
    // Its failed pass backed off every relay, the Worker's too (failures 1).
    const stats = await runCli(["stats", "--json"], env());
    expect(JSON.parse(stats.stdout)).toMatchObject({ backlog: 3, poisoned: 0, relay: { failures: 0 } });
  });

  it("relay commands name the missing variable", async () => {
    const r = await runCli(["relay", "once"], env());
    expect(r.code).toBe(2);
    // One line naming what is missing; the usage text would bury it and says nothing about it.
    expect(r.stderr.trim()).toBe(
      "edge-outbox: QSTASH_TOKEN is not set; PUBLIC_URL is not set (environment or .env)",
    );
  });

  it("relay commands check the variables as the Worker checks its bindings", async () => {
    const r = await runCli(["relay", "once"], {
      ...env(),
      QSTASH_URL: "ftp://127.0.0.1:1",
      QSTASH_TOKEN: "t",
      PUBLIC_URL: "127.0.0.1:8787",
      QSTASH_BATCH_MESSAGES: "0",
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/QSTASH_URL must be an http\(s\) URL; PUBLIC_URL must be an http\(s\) URL/);
    expect(r.stderr).toMatch(/QSTASH_BATCH_MESSAGES must be at least 1 message/);
  });
});

describe("alerts resolve --kind event.poisoned", () => {
  it("says the events it counted are still poisoned, and how to send them again", async () => {
    const ids = await seedEvents(t.pool, 2, { type: "supplier.connected" });
    await poisonEvents(t.pool, ids, new Date(Date.now() - 60_000).toISOString());
    const resolved = await runCli(["alerts", "resolve", "--kind", "event.poisoned"], env());
    expect([resolved.code, resolved.stdout.trim()]).toEqual([
      0,
      "resolved 1 event.poisoned alert; 2 events are still poisoned: `events requeue --all` sends them again",
    ]);
  });
});
