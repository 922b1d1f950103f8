import { beforeEach, describe, expect, it } from "vitest";
import { drizzle } from "drizzle-orm/node-postgres";
import {
  CANARY_EVERY_MINUTES,
  CANARY_LATE_AFTER_MINUTES,
  canaryArrived,
  checkCanary,
  recordCanaryAnswer,
  type CanaryBody,
  type CanaryQueue,
} from "../../src/domain/canary.ts";
import { raisedAgainNote } from "../../src/domain/alert-kinds.ts";
import type { Db } from "../../src/domain/db.ts";
import { PublishError } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";

// The sweep's canary step against real Postgres, with a queue that records what it
// was given instead of QStash, and the sweep's clock moved by the test.
// test/worker/workerd-canary.test.ts runs it end to end, through QStash and the Worker.
const t = useTestDatabase();
const db = () => t.db as unknown as Db;
const label = "edge-outbox-test";
const publicUrl = "https://outbox.example.com";
const start = new Date("2026-12-07T12:00:00Z");
const at = (minutes: number) => new Date(start.getTime() + minutes * 60_000);

class FakeQueue implements CanaryQueue {
  sent: CanaryBody[] = [];
  down: PublishError | undefined;
  async send(body: CanaryBody): Promise<string> {
    if (this.down) throw this.down;
    this.sent.push(body);
    return `msg_${this.sent.length}`;
  }
}

let queue: FakeQueue;
const check = (minutes: number, q: CanaryQueue = queue) =>
  checkCanary(db(), q, { label, publicUrl, now: at(minutes) });
/** The newest canary arrives, as the route takes it. */
const arrive = async () =>
  expect(await canaryArrived(db(), queue.sent.at(-1)!, label)).toEqual({ ours: true });

async function openAlerts(kind: string) {
  const { rows } = await t.pool.query(
    "SELECT message, details FROM outbox_alerts WHERE kind = $1 AND resolved_at IS NULL",
    [kind],
  );
  return rows as { message: string; details: Record<string, unknown> }[];
}

beforeEach(async () => {
  queue = new FakeQueue();
  await t.pool.query("TRUNCATE qstash_canaries, outbox_alerts");
});

describe("the sweep's canary", () => {
  it("is sent every 30 minutes while each arrives, and raises nothing", async () => {
    expect(await check(0)).toMatchObject({ sent: true, late: false });
    expect(queue.sent).toEqual([{ canaryId: expect.any(String), label }]);
    await arrive();
    for (const minute of [1, 10, CANARY_EVERY_MINUTES - 1]) {
      expect(await check(minute)).toMatchObject({ sent: false, late: false, waitingSince: null });
    }
    expect(await check(CANARY_EVERY_MINUTES)).toMatchObject({ sent: true, late: false });
    expect(queue.sent).toHaveLength(2);
    expect(queue.sent[0]!.canaryId).not.toBe(queue.sent[1]!.canaryId);
    expect(await openAlerts("jobs.not_arriving")).toEqual([]);
    const { rows } = await t.pool.query("SELECT message_id FROM qstash_canaries ORDER BY sent_at");
    expect(rows.map((r) => r.message_id)).toEqual(["msg_1", "msg_2"]);
  });

  it("raises jobs.not_arriving once one is over 5 minutes late, sends every 5 minutes, and resolves on an arrival", async () => {
    await check(0);
    // Within the five minutes: waiting, not late, nothing sent again.
    expect(await check(CANARY_LATE_AFTER_MINUTES)).toMatchObject({ sent: true, late: false });
    expect(await openAlerts("jobs.not_arriving")).toEqual([]);
    const late = await check(CANARY_LATE_AFTER_MINUTES + 1);
    expect(late).toMatchObject({ sent: false, late: true, raised: true, waitingSince: start });
    const [alert] = await openAlerts("jobs.not_arriving");
    // QStash took both and says nothing failed: something else answered them.
    expect(alert!.message).toBe(
      "jobs do not reach this Worker: no canary job the cron sweep sent through QStash to " +
        "https://outbox.example.com/jobs/_canary since 2026-12-07 12:00:00 UTC has arrived (2 sent, one every " +
        "5 min); none ever has. QStash reports no failure for them: something at that URL answered, and it was " +
        "not this Worker (or they still wait in QStash). PUBLIC_URL is likely not this Worker's address, and every " +
        "job, its body included, goes there: set it to this Worker's address, and see what QStash's logs say of " +
        "the canaries' messages",
    );
    expect(alert!.details).toMatchObject({
      waitingSince: "2026-12-07T12:00:00.000Z",
      canaries: 2,
      lastArrivedAt: null,
      url: "https://outbox.example.com/jobs/_canary",
    });
    // Still late a sweep later: the same alert, not a second; one more canary at 10 min.
    expect(await check(10)).toMatchObject({ sent: true, late: true, raised: false });
    expect(queue.sent).toHaveLength(3);
    expect(await openAlerts("jobs.not_arriving")).toHaveLength(1);

    // What QStash's dead letter said the Worker answered is in the message.
    expect(
      await recordCanaryAnswer(db(), {
        body: JSON.stringify(queue.sent[1]),
        responseStatus: 401,
        responseBody: '{"error":"unauthorized",\n"message":"invalid QStash signature"}',
      }),
    ).toBe(true);
    await check(11);
    expect((await openAlerts("jobs.not_arriving"))[0]!.message).toContain(
      ' has arrived (3 sent, one every 5 min); none ever has. The Worker refused QStash\'s signature (answered 401 {"error":"unauthorized", "message":"invalid QStash signature"}): QSTASH_CURRENT_SIGNING_KEY and QSTASH_NEXT_SIGNING_KEY are not this QStash account\'s. Every job fails',
    );

    // Fixed: the next canary arrives, and the next sweep resolves the alert.
    await arrive();
    expect(await check(12)).toMatchObject({ sent: false, late: false, resolved: true, waitingSince: null });
    expect(await openAlerts("jobs.not_arriving")).toEqual([]);
    const { rows } = await t.pool.query(
      "SELECT message FROM outbox_alerts WHERE kind = 'jobs.not_arriving' AND resolved_at IS NOT NULL",
    );
    expect(rows[0].message).toMatch(
      /^jobs reach this Worker again: a canary job sent through QStash arrived at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(none sent from 2026-12-07 12:00:00 UTC until then had\)$/,
    );
  });

  it("says when QStash did not take the canary, without failing the sweep, and to check QStash's bindings", async () => {
    queue.down = new PublishError("QStash unreachable: connection refused", "outage");
    expect(await check(0)).toMatchObject({
      sent: true,
      publishError: "QStash unreachable: connection refused",
      late: false,
    });
    await check(CANARY_LATE_AFTER_MINUTES);
    expect(await check(CANARY_LATE_AFTER_MINUTES + 1)).toMatchObject({ late: true, raised: true });
    expect((await openAlerts("jobs.not_arriving"))[0]!.message).toContain(
      "; none ever has. QStash did not even take the newest: QStash unreachable: connection refused. Until it " +
        "does, no job is published either (writes still commit, and the relay keeps them): check QSTASH_URL and " +
        "QSTASH_TOKEN",
    );
  });

  it("does not call one lost canary late: the one sent after it is given a minute", async () => {
    // A canary lost to a blip (no retries), then the sweeps five minutes on.
    await check(0);
    expect(await check(CANARY_LATE_AFTER_MINUTES)).toMatchObject({ sent: true, late: false });
    // Still within the replacement's minute (QStash delivers in well under a second).
    expect(await check(CANARY_LATE_AFTER_MINUTES + 0.5)).toMatchObject({ sent: false, late: false });
    await arrive();
    expect(await check(CANARY_LATE_AFTER_MINUTES + 1)).toMatchObject({ late: false, waitingSince: null });
    expect(await openAlerts("jobs.not_arriving")).toEqual([]);
    // Sweeps that stopped for an hour: the first one back sends one and waits for it.
    expect(await check(CANARY_EVERY_MINUTES + 60)).toMatchObject({ sent: true, late: false });
    expect(await openAlerts("jobs.not_arriving")).toEqual([]);
  });

  it("raises the alert once when two sweeps find it late at the same time", async () => {
    await check(0);
    await check(CANARY_LATE_AFTER_MINUTES);
    // Two sweeps at once, each on its own connections: the open alert's unique index decides.
    const other = drizzle(t.newPool(2)) as unknown as Db;
    const results = await Promise.all([
      checkCanary(db(), queue, { label, publicUrl, now: at(7) }),
      checkCanary(other, queue, { label, publicUrl, now: at(7) }),
    ]);
    expect(results.every((r) => r.late)).toBe(true);
    expect(results.filter((r) => r.raised)).toHaveLength(1);
    expect(await openAlerts("jobs.not_arriving")).toHaveLength(1);
  });

  it("keeps the newest arrival and what came after it, and deletes older history", async () => {
    await check(0);
    await arrive();
    await check(CANARY_EVERY_MINUTES);
    await arrive();
    // Three days on, a canary has not arrived yet: the one before it is the state's anchor.
    await check(3 * 24 * 60);
    const { rows } = await t.pool.query("SELECT id FROM qstash_canaries ORDER BY sent_at");
    expect(rows.map((r) => r.id)).toEqual([queue.sent[1]!.canaryId, queue.sent[2]!.canaryId]);
    expect(await check(3 * 24 * 60 + 1)).toMatchObject({ late: false, waitingSince: at(3 * 24 * 60) });
  });
});

describe("a canary the route takes", () => {
  it("from another deployment raises jobs.foreign, one per label, counting them", async () => {
    const foreign = { canaryId: crypto.randomUUID(), label: "edge-outbox-staging" };
    const arrival = await canaryArrived(db(), foreign, label);
    expect(arrival.ours).toBe(false);
    await canaryArrived(db(), { canaryId: crypto.randomUUID(), label: "edge-outbox-staging" }, label);
    // Another deployment that shares our label (its PUBLIC_URL is ours): its own alert, said so.
    await canaryArrived(db(), { canaryId: crypto.randomUUID(), label }, label);
    const alerts = await openAlerts("jobs.foreign");
    expect(alerts.map((a) => [a.details.label, a.details.canaries])).toEqual(
      expect.arrayContaining([
        ["edge-outbox-staging", 2],
        [label, 1],
      ]),
    );
    expect(alerts).toHaveLength(2);
    const staging = alerts.find((a) => a.details.label === "edge-outbox-staging")!;
    expect(staging.message).toMatch(
      new RegExp(
        "^2 canary jobs of another deployment \\(label edge-outbox-staging\\) reached this Worker, the latest at " +
          "\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC: that deployment's jobs are published to this Worker's URL " +
          "and signed with keys it takes \\(the same QStash account\\), so each of them runs here, against this " +
          "database: its events become this deployment's mails and webhooks\\. Set that deployment's PUBLIC_URL " +
          "to its own Worker's address$",
      ),
    );
    expect(alerts.find((a) => a.details.label === label)!.message).toMatch(
      new RegExp(
        `^1 canary job of another deployment \\(label ${label}, the same as this deployment's\\) reached this Worker`,
      ),
    );
    // The route's refusal says what the alert says.
    expect(arrival).toEqual({
      ours: false,
      message: expect.stringMatching(/^1 canary job of another deployment/),
    });
    // Resolving it says what brings it back: the route, not a sweep, raises it.
    expect(raisedAgainNote("jobs.foreign")).toBe(
      "while that deployment's canaries keep reaching this Worker, the next one raises it again",
    );
    // Nothing of ours was marked.
    expect((await t.pool.query("SELECT count(*)::int AS n FROM qstash_canaries")).rows[0].n).toBe(0);
  });

  it("twice (QStash delivers at least once) keeps its first arrival", async () => {
    await check(0);
    await arrive();
    const first = (await t.pool.query("SELECT arrived_at FROM qstash_canaries")).rows[0].arrived_at;
    await arrive();
    expect((await t.pool.query("SELECT arrived_at FROM qstash_canaries")).rows[0].arrived_at).toEqual(first);
  });
});

describe("a canary's dead letter", () => {
  it("is ours only when its body names a canary this database sent", async () => {
    const letter = { responseStatus: 500, responseBody: "boom" };
    expect(await recordCanaryAnswer(db(), { ...letter, body: "not json" })).toBe(false);
    expect(await recordCanaryAnswer(db(), { ...letter, body: '{"canaryId":"x"}' })).toBe(false);
    // Thirty-six of the characters a UUID has is no UUID: asked of the database, it threw.
    const shaped = JSON.stringify({ canaryId: "-".repeat(36), label });
    expect(await recordCanaryAnswer(db(), { ...letter, body: shaped })).toBe(false);
    // Another deployment's, on our label and URL: its own sweep reads it (and says why).
    const theirs = JSON.stringify({ canaryId: crypto.randomUUID(), label });
    expect(await recordCanaryAnswer(db(), { ...letter, body: theirs })).toBe(false);
  });

  it("says when QStash reached nothing", async () => {
    await check(0);
    expect(
      await recordCanaryAnswer(db(), {
        body: JSON.stringify(queue.sent[0]),
        responseStatus: null,
        responseBody: null,
      }),
    ).toBe(true);
    const { rows } = await t.pool.query("SELECT answer FROM qstash_canaries");
    expect(rows[0].answer).toBe("no answer");
  });
});
