import { describe, expect, it, vi } from "vitest";
import { deploymentLabel } from "../../src/outbox/index.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";
import { useWorkerd } from "../support/workerd.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// The canary end to end (ADR 0045): the real Worker bundle in workerd, its cron
// sweep, the QStash dev server delivering and signing, Postgres. And the mistake it
// is there to catch: a second deployment (its own database, the same QStash account)
// whose PUBLIC_URL names this Worker, so its jobs run here.
const t = useTestDatabase();
const stack = useWorkerd(t);
const staging = useTestDatabase();

async function sweep(): Promise<void> {
  const res = await stack.fetch("/__scheduled?cron=*+*+*+*+*");
  expect(res.status).toBe(200);
  await res.text();
}

async function openAlerts(pool: typeof t.pool, kind: string) {
  const { rows } = await pool.query(
    "SELECT message, details FROM outbox_alerts WHERE kind = $1 AND resolved_at IS NULL",
    [kind],
  );
  return rows as { message: string; details: Record<string, unknown> }[];
}

/** A sweep of the staging deployment, run here in Node with its own database. */
async function stagingSweep(): Promise<string> {
  const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
  try {
    await createScheduled(openTestPool(staging.pool))(
      {} as ScheduledController,
      bindings({
        DATABASE_URL: staging.url,
        QSTASH_URL: stack.qstash.url,
        QSTASH_TOKEN: stack.qstash.token,
        // The mistake: staging's PUBLIC_URL is production's, and so, made from it, its label.
        PUBLIC_URL: stack.url,
      }),
      executionContext().ctx,
    );
    return String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
  } finally {
    log.mockRestore();
  }
}

describe("the cron sweep's canary", () => {
  it("reaches the Worker through QStash, and the next sweeps raise nothing", async () => {
    await sweep();
    await waitFor(async () => {
      const { rows } = await t.pool.query("SELECT 1 FROM qstash_canaries WHERE arrived_at IS NOT NULL");
      return rows.length === 1;
    }, 10_000);
    const { rows } = await t.pool.query("SELECT message_id, publish_error FROM qstash_canaries");
    expect(rows).toEqual([{ message_id: expect.any(String), publish_error: null }]);
    // It carried the deployment's label, as every job does (ADR 0027).
    const view = await fetch(`${stack.qstash.url}/v2/messages/${rows[0].message_id}`, {
      headers: { authorization: `Bearer ${stack.qstash.token}` },
    });
    expect(((await view.json()) as { labels?: string[] }).labels).toEqual([deploymentLabel(stack.url)]);
    // Late in a sweep's eyes only once it is over five minutes old and unanswered.
    await t.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '6 minutes'");
    await sweep();
    expect(await openAlerts(t.pool, "jobs.not_arriving")).toEqual([]);
    expect((await t.pool.query("SELECT count(*)::int AS n FROM qstash_canaries")).rows[0].n).toBe(1);
  });

  it("of a deployment whose PUBLIC_URL is this Worker raises jobs.foreign here, and jobs.not_arriving there", async () => {
    const label = deploymentLabel(stack.url);
    const canaryLetters = () =>
      stack.qstash.messages().filter((m) => m.url.endsWith("/jobs/_canary") && m.state === "ERROR").length;
    const line = await stagingSweep();
    expect(line).toMatch(
      /; canary: sent; waiting for one sent at \S+; alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/,
    );
    await waitFor(async () => (await openAlerts(t.pool, "jobs.foreign")).length === 1, 10_000);
    const [foreign] = await openAlerts(t.pool, "jobs.foreign");
    expect(foreign!.details).toMatchObject({ label, canaries: 1 });
    expect(foreign!.message).toMatch(
      new RegExp(
        `^1 canary job of another deployment \\(label ${label}, the same as this deployment's\\) reached this Worker, the latest at `,
      ),
    );
    // Production's own canaries are untouched by it.
    expect((await t.pool.query("SELECT count(*)::int AS n FROM qstash_canaries")).rows[0].n).toBe(1);

    // Refused with 489, so QStash dead-lettered it at once, on production's label and
    // URL. Production's sweep leaves that letter: the canary is not its own.
    await waitFor(() => canaryLetters() === 1, 10_000);
    await sweep();
    const { messages } = (await (
      await fetch(`${stack.qstash.url}/v2/dlq`, {
        headers: { authorization: `Bearer ${stack.qstash.token}` },
      })
    ).json()) as { messages: { url: string }[] };
    expect(messages.map((m) => m.url)).toEqual([`${stack.url}/jobs/_canary`]);

    // Staging's sweeps, its clock moved rather than waited: five minutes on it reads
    // the letter and sends another (refused too); a minute later, two canaries in a
    // row have not arrived, and it says why.
    await staging.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '5 minutes'");
    expect(await stagingSweep()).toMatch(/dead letters: 1 taken from QStash, 0 of them new failures;/);
    await waitFor(() => canaryLetters() === 2, 10_000);
    await staging.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '1 minute'");
    const later = await stagingSweep();
    expect(later).toMatch(
      /; canary: none due; jobs not arriving since \S+ \(alert raised\); alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/,
    );
    const [late] = await openAlerts(staging.pool, "jobs.not_arriving");
    expect(late!.message).toContain(
      ` The Worker at that URL refused it as another deployment's canary (answered 489 {"error":{"code":"job_rejected","message":"not this deployment's canary: `,
    );
    expect(late!.message).toContain(
      "PUBLIC_URL names another deployment's Worker, which runs this deployment's jobs against its own database.",
    );
    expect((await openAlerts(t.pool, "jobs.foreign"))[0]!.details).toMatchObject({ canaries: 2 });
    // Its dead letters were taken as a canary's, not recorded as job failures.
    expect((await staging.pool.query("SELECT count(*)::int AS n FROM job_failures")).rows[0].n).toBe(0);
    expect(stack.qstash.messages().filter((m) => m.kind === "failure-callback")).toEqual([]);
  });
});
