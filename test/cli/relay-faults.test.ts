import { describe, expect, it } from "vitest";
import { runCli } from "../support/cli.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { cliEnvWithQStash, usePausedQStash } from "../support/job-failures.ts";

// `relay once|drain` from a terminal when something goes wrong under it: real
// Postgres, the QStash dev server (delivery paused), the CLI in its own process.
const t = useTestDatabase();
const paused = usePausedQStash(t);

const env = () => cliEnvWithQStash(t, paused);

const counts = async () =>
  (
    await t.pool.query<{ fanned: number; pending: number }>(
      `SELECT count(*) FILTER (WHERE fanned_out_at IS NOT NULL)::int AS fanned,
              count(*) FILTER (WHERE fanned_out_at IS NULL AND poisoned_at IS NULL)::int AS pending
         FROM events`,
    )
  ).rows[0]!;

describe("outbox relay under faults", () => {
  it("a drain whose connection is cut says how far it got and that the rest is pending; run again, nothing is lost", async () => {
    await t.pool.query("TRUNCATE events CASCADE");
    await seedEvents(t.pool, 6_000, { type: "supplier.connected" });
    // Its own application_name, so only its connections are cut, not this test's.
    const name = `relay-cut-${process.pid}`;
    const drain = runCli(["relay", "drain", "--batch-size", "10"], { ...env(), PGAPPNAME: name });
    await waitFor(async () => (await counts()).fanned > 0, 30_000);
    await t.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", [
      name,
    ]);
    const cut = await drain;
    expect(cut.code).toBe(1);
    // It said pg's "Client has encountered a connection error and is not queryable", alone.
    expect(cut.stderr.trim()).toMatch(
      /^edge-outbox: relay drain stopped after \d+ pass(es)? \(fanned \d+\): the connection to the database was lost \(.+\): what the command had not committed was rolled back; run it again$/,
    );
    const after = await counts();
    expect(after.fanned).toBeGreaterThan(0);
    expect(after.pending).toBeGreaterThan(0);
    expect(after.fanned + after.pending).toBe(6_000);

    const again = await runCli(["relay", "drain"], env());
    expect(again.code, again.stderr).toBe(0);
    expect(await counts()).toEqual({ fanned: 6_000, pending: 0 });
  }, 120_000);

  it("a wrong QStash token stops relay once and drain before any pass, and backs nothing off", async () => {
    await t.pool.query("TRUNCATE events CASCADE");
    await seedEvents(t.pool, 2, { type: "supplier.connected" });
    for (const command of [
      ["relay", "once"],
      ["relay", "drain", "--json"],
    ]) {
      const r = await runCli(command, { ...env(), QSTASH_TOKEN: "not-the-token" });
      expect(r.code, command.join(" ")).toBe(1);
      expect(r.stdout + r.stderr).toContain("check QSTASH_URL and QSTASH_TOKEN; no pass ran");
    }
    const { rows } = await t.pool.query("SELECT failures, backoff_until FROM outbox_relay_state");
    expect(rows).toEqual([{ failures: 0, backoff_until: null }]);
    expect(await counts()).toEqual({ fanned: 0, pending: 2 });
    expect(paused.qstash.messages()).toEqual([]);
  }, 60_000);

  it("relay once exits 1 while the relay is backed off, as relay drain does", async () => {
    await t.pool.query("TRUNCATE events CASCADE");
    await seedEvents(t.pool, 2, { type: "supplier.connected" });
    await t.pool.query(
      "UPDATE outbox_relay_state SET failures = 1, backoff_until = now() + interval '1 hour' WHERE id = 1",
    );
    try {
      const once = await runCli(["relay", "once"], env());
      expect(once.stdout).toMatch(/relay is backed off until .*; nothing claimed/);
      // It exited 0: a script checking it during an outage read success.
      expect(once.code).toBe(1);
      const drain = await runCli(["relay", "drain", "--budget", "5"], env());
      expect(drain.code).toBe(1);
    } finally {
      await t.pool.query("UPDATE outbox_relay_state SET failures = 0, backoff_until = NULL WHERE id = 1");
    }
  }, 60_000);

  it("--now ends a backoff once QStash answers, so a fixed outage drains without waiting out the cap", async () => {
    await t.pool.query("TRUNCATE events CASCADE");
    await seedEvents(t.pool, 3, { type: "supplier.connected" });
    const backOff = () =>
      t.pool.query(
        "UPDATE outbox_relay_state SET failures = 9, backoff_until = now() + interval '1 hour' WHERE id = 1",
      );
    await backOff();
    try {
      // Not while QStash does not answer this terminal: the backoff stands.
      const refused = await runCli(["relay", "drain", "--now"], { ...env(), QSTASH_TOKEN: "not-the-token" });
      expect(refused.code).toBe(1);
      expect(
        (await t.pool.query("SELECT backoff_until FROM outbox_relay_state")).rows[0].backoff_until,
      ).not.toBeNull();

      const drain = await runCli(["relay", "drain", "--now"], env());
      expect(drain.code, drain.stderr).toBe(0);
      expect(drain.stderr).toMatch(
        /^relay: ended the backoff that lasted until \d{4}-\d\d-\d\dT[\d:.]+Z \(--now; QStash answered this terminal\)$/m,
      );
      expect(await counts()).toEqual({ fanned: 3, pending: 0 });
      // The pass that worked cleared the failures too.
      expect((await t.pool.query("SELECT failures, backoff_until FROM outbox_relay_state")).rows).toEqual([
        { failures: 0, backoff_until: null },
      ]);
      const idle = await runCli(["relay", "once", "--now"], env());
      expect(idle.code).toBe(0);
      expect(idle.stderr).toContain("relay: not backed off (--now changed nothing)");
    } finally {
      await t.pool.query("UPDATE outbox_relay_state SET failures = 0, backoff_until = NULL WHERE id = 1");
    }
  }, 60_000);
});
