import { Client } from "@upstash/qstash";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import type { Db } from "../../src/domain/db.ts";
import {
  BACKLOG_ALERT_AFTER_MINUTES,
  createQStashWaitLists,
  evaluateBacklogs,
  jobsWaitingFor,
  jobsWaitingText,
  readWaitLists,
  type WaitList,
  type WaitListReading,
  type WaitLists,
} from "../../src/domain/subscription-backlog.ts";
import { subscriptionFlowControl } from "../../src/outbox/index.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// subscription.backlogged (ADR 0039): jobs QStash holds behind a subscription's
// flow-control limit are invisible to the database; the sweep reads the wait lists.
// Against real Postgres; QStash's answers are given (a fake of QStash, not of the
// database), except where the real dev server answers them.
const t = useTestDatabase();
const db = () => t.db as unknown as Db;
const PUBLIC_URL = "https://outbox.example.com";
const minutesLater = (at: Date, n: number) => new Date(at.getTime() + n * 60_000);

beforeEach(async () => {
  await t.pool.query("TRUNCATE subscription_wait_lists, outbox_alerts");
});

/** A QStash whose wait lists are what the test says, by subscription. */
function qstash(waiting: Record<string, number | WaitList | null>): WaitLists {
  const byKey = new Map(
    Object.entries(waiting).map(([name, w]) => [subscriptionFlowControl(PUBLIC_URL, name, 1).key, w]),
  );
  return {
    get: async (key) => {
      const w = byKey.get(key);
      if (w === undefined || w === null) return null;
      return typeof w === "number" ? { waiting: w, parallelism: 10, inFlight: 10, paused: false } : w;
    },
  };
}

const check = (lists: WaitLists, now: Date) => evaluateBacklogs(db(), lists, { publicUrl: PUBLIC_URL, now });

async function alerts() {
  const { rows } = await t.pool.query<{
    subscription: string;
    message: string;
    details: Record<string, unknown>;
    resolved_at: Date | null;
  }>(
    "SELECT subscription, message, details, resolved_at FROM outbox_alerts WHERE kind = 'subscription.backlogged' ORDER BY id",
  );
  return rows;
}

describe("evaluateBacklogs", () => {
  it("raises an alert once a wait list has stayed non-empty for 15 minutes, and resolves it when empty", async () => {
    const start = new Date("2026-12-06T12:00:00Z");
    const first = await check(qstash({ "webhook.fanout": 900 }), start);
    expect(first).toMatchObject({ waiting: { "webhook.fanout": 900, "notify.mail": 0 }, backlogged: 0 });
    expect(await alerts()).toEqual([]);
    const [reading] = (await readWaitLists(db())).filter((r) => r.waiting > 0);
    expect(reading).toMatchObject({ subscription: "webhook.fanout", waiting: 900, waitingSince: start });

    // Still waiting one sweep short of the limit: nothing yet.
    await check(qstash({ "webhook.fanout": 4000 }), minutesLater(start, BACKLOG_ALERT_AFTER_MINUTES - 1));
    expect(await alerts()).toEqual([]);

    const late = minutesLater(start, BACKLOG_ALERT_AFTER_MINUTES);
    const raised = await check(qstash({ "webhook.fanout": 93_012 }), late);
    expect(raised).toMatchObject({ backlogged: 1, raised: ["webhook.fanout"], caughtUp: [] });
    const [alert] = await alerts();
    expect(alert!.message).toBe(
      "subscription webhook.fanout is behind: at 2026-12-06 12:15:00 UTC, 93012 of its jobs waited in QStash " +
        "behind its flow-control limit (10 at a time, 10 under way), some at every reading " +
        "since 2026-12-06 12:00:00 UTC (over 15 min), so its events reach it late: its handler may be slow, " +
        "or its events more than it can take 10 at a time",
    );
    expect(alert!.details).toMatchObject({ waiting: 93_012, waitingSince: "2026-12-06T12:00:00.000Z" });

    // The next sweep brings the same alert up to date.
    const again = await check(qstash({ "webhook.fanout": 50_000 }), minutesLater(late, 1));
    expect(again).toMatchObject({ backlogged: 1, raised: [] });
    expect(await alerts()).toMatchObject([{ details: { waiting: 50_000 }, resolved_at: null }]);

    // Empty (QStash's 404 for a key with nothing lately counts as empty too): resolved.
    const done = await check(qstash({ "webhook.fanout": null }), minutesLater(late, 2));
    expect(done).toMatchObject({ backlogged: 0, caughtUp: ["webhook.fanout"] });
    const [resolved] = await alerts();
    expect(resolved!.resolved_at).toBeInstanceOf(Date);
    expect(resolved!.message).toMatch(
      /^subscription webhook\.fanout caught up: QStash held none of its jobs waiting at 2026-12-06 12:17:00 UTC \(some had waited at every reading since 2026-12-06 12:00:00 UTC\)$/,
    );
    expect((await readWaitLists(db())).every((r) => r.waiting === 0 && r.waitingSince === null)).toBe(true);
  });

  it("an empty reading starts the run again: a busy subscription that keeps up raises nothing", async () => {
    const start = new Date("2026-12-06T12:00:00Z");
    for (let minute = 0; minute <= 40; minute++) {
      // Jobs waiting at most sweeps, but the list empties now and then.
      const waiting = minute % 10 === 9 ? 0 : 50;
      await check(qstash({ "corpus.index": waiting }), minutesLater(start, minute));
    }
    expect(await alerts()).toEqual([]);
  });

  it("says when delivery is paused", async () => {
    const start = new Date("2026-12-06T12:00:00Z");
    const paused = { waiting: 12, parallelism: 10, inFlight: 0, paused: true };
    await check(qstash({ "notify.mail": paused }), start);
    await check(qstash({ "notify.mail": paused }), minutesLater(start, 20));
    const [alert] = await alerts();
    // The pause, not the limit, holds them: said first, with what to do.
    expect(alert!.message).toBe(
      "subscription notify.mail is held: QStash delivery of its jobs is paused, and at 2026-12-06 12:20:00 UTC " +
        "12 of them waited, some at every reading since 2026-12-06 12:00:00 UTC (over 15 min); resume delivery in QStash",
    );
  });

  it("changes no alert when QStash cannot be read, and marks the readings that old", async () => {
    const start = new Date("2026-12-06T12:00:00Z");
    await check(qstash({ "webhook.fanout": 10 }), start);
    await check(qstash({ "webhook.fanout": 10 }), minutesLater(start, 20));
    const before = await alerts();
    const down: WaitLists = { get: () => Promise.reject(new Error("QStash answered 503")) };
    const result = await check(down, minutesLater(start, 21));
    expect(result).toMatchObject({ unreadable: "QStash answered 503", waiting: {}, backlogged: 0 });
    expect(await alerts()).toEqual(before);
    // The views said "10 waiting" for as long as QStash could not be asked.
    expect((await readWaitLists(db())).find((r) => r.subscription === "webhook.fanout")).toMatchObject({
      waiting: 10,
      checkedAt: minutesLater(start, 20),
      unreadSince: minutesLater(start, 21),
      unreadError: "QStash answered 503",
    });
    // A second failure keeps when it began; a reading clears it, the run going on.
    await check(down, minutesLater(start, 22));
    expect((await readWaitLists(db()))[0]!.unreadSince).toEqual(minutesLater(start, 21));
    await check(qstash({ "webhook.fanout": 10 }), minutesLater(start, 23));
    expect((await readWaitLists(db())).find((r) => r.subscription === "webhook.fanout")).toMatchObject({
      unreadSince: null,
      unreadError: null,
      waitingSince: start,
    });
  });

  it("overlapping sweeps on their own connections raise one alert", async () => {
    const start = new Date("2026-12-06T12:00:00Z");
    await check(qstash({ "webhook.fanout": 10 }), start);
    const pools = [t.newPool(1), t.newPool(1), t.newPool(1), t.newPool(1)];
    try {
      const { drizzle } = await import("drizzle-orm/node-postgres");
      const results = await Promise.all(
        pools.map((pool) =>
          evaluateBacklogs(drizzle(pool) as unknown as Db, qstash({ "webhook.fanout": 10 }), {
            publicUrl: PUBLIC_URL,
            now: minutesLater(start, 20),
          }),
        ),
      );
      expect(results.flatMap((r) => r.raised)).toEqual(["webhook.fanout"]);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    expect((await alerts()).filter((a) => a.resolved_at === null)).toHaveLength(1);
  });
});

describe("createQStashWaitLists against the QStash dev server", () => {
  let dev: QStashDev;
  beforeAll(async () => {
    dev = await startQStashDev({ timeScale: 0.001, startPaused: true });
  });
  afterAll(async () => {
    await dev?.close();
  });

  it("reads the subscription's key as the relay publishes with it; 404 is null; a wrong token throws", async () => {
    const client = new Client({ baseUrl: dev.url, token: dev.token, devMode: false, enableTelemetry: false });
    const control = subscriptionFlowControl(PUBLIC_URL, "webhook.fanout", 4);
    for (let i = 0; i < 6; i++) {
      await client.publishJSON({
        url: "http://127.0.0.1:9/jobs/webhook.fanout",
        body: { i },
        flowControl: control,
      });
    }
    const lists = createQStashWaitLists({ baseUrl: dev.url, token: dev.token });
    expect(await lists.get(control.key)).toEqual({ waiting: 6, parallelism: 4, inFlight: 0, paused: true });
    expect(await lists.get(subscriptionFlowControl(PUBLIC_URL, "notify.mail", 4).key)).toBeNull();
    await expect(
      createQStashWaitLists({ baseUrl: dev.url, token: "wrong" }).get(control.key),
    ).rejects.toThrow(/QStash answered 401 to GET \/v2\/flowControl\//);
  });
});

describe("createQStashWaitLists against another spelling", () => {
  it("reads waitlistSize as Upstash's OpenAPI schema spells it", async () => {
    const { createServer } = await import("node:http");
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ flowControlKey: "k", waitlistSize: 5, parallelismMax: 2, parallelismCount: 2 }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as { port: number };
      const lists = createQStashWaitLists({ baseUrl: `http://127.0.0.1:${port}`, token: "t" });
      expect(await lists.get("k")).toEqual({ waiting: 5, parallelism: 2, inFlight: 2, paused: false });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("the cron sweep", () => {
  it("says what it read, or that QStash was not read, in its line", async () => {
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      // No QStash here (port 9): the wait lists are not read, the rest runs.
      await createScheduled(openTestPool(t.newPool(2)))(
        {} as ScheduledController,
        bindings({ DATABASE_URL: t.url }),
        executionContext().ctx,
      );
      const line = String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
      expect(line).toMatch(
        /; jobs waiting in QStash: not read \(fetch failed \(bad port\)\); canary: not taken by QStash \(.+\); waiting for one sent at \S+; alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/,
      );
    } finally {
      log.mockRestore();
    }
    expect(await readWaitLists(db())).toEqual([]);
  });
});

describe("an event's jobs that may still wait in QStash", () => {
  const fannedOutAt = new Date("2026-12-06T12:00:00Z");
  const reading = (subscription: string, over: Partial<WaitListReading> = {}): WaitListReading => ({
    subscription,
    waiting: 12,
    parallelism: 10,
    inFlight: 10,
    paused: false,
    waitingSince: new Date("2026-12-06T11:50:00Z"),
    checkedAt: new Date("2026-12-06T12:01:00Z"),
    unreadSince: null,
    unreadError: null,
    ...over,
  });
  const none = { jobFailures: [], webhookDeliveries: 0 };
  const event = {
    fannedOutAt,
    fanout: {
      "notify.mail": { messageId: "msg_mail" },
      "corpus.index": { coalescedInto: "01a24dcb-8713-7bf8-a5d3-91a478a5f3f8" },
      "webhook.fanout": { messageId: "msg_fanout" },
    },
  };

  it("names the subscriptions it sent a job to whose wait list held jobs at a reading after it", () => {
    const waiting = jobsWaitingFor(
      event,
      [
        reading("corpus.index"), // coalesced into another event's job: no job of its own
        reading("notify.mail"),
        reading("webhook.fanout", { waiting: 0, waitingSince: null }), // empty
      ],
      none,
    );
    expect(waiting).toEqual([
      {
        subscription: "notify.mail",
        waiting: 12,
        paused: false,
        checkedAt: new Date("2026-12-06T12:01:00Z"),
      },
    ]);
    expect(jobsWaitingText(waiting[0]!)).toBe(
      "12 notify.mail jobs waited behind their flow-control limit when the sweep read QStash at 2026-12-06T12:01:00.000Z",
    );
  });

  it("says nothing from a reading taken before the event's job was sent, or of an event not fanned out", () => {
    const before = reading("notify.mail", { checkedAt: new Date("2026-12-06T11:59:59Z") });
    expect(jobsWaitingFor(event, [before], none)).toEqual([]);
    expect(jobsWaitingFor({ fannedOutAt: null, fanout: null }, [reading("notify.mail")], none)).toEqual([]);
  });

  it("says nothing of a job the event's failures or deliveries show ran after the reading", () => {
    const readings = [reading("notify.mail"), reading("webhook.fanout")];
    expect(jobsWaitingFor(event, readings, none).map((w) => w.subscription)).toEqual([
      "notify.mail",
      "webhook.fanout",
    ]);
    // Its mail job is listed as failed, and the fan-out made the webhook deliveries.
    expect(
      jobsWaitingFor(event, readings, {
        jobFailures: [{ subscription: "notify.mail" }],
        webhookDeliveries: 2,
      }),
    ).toEqual([]);
  });

  it("says when QStash's delivery was paused, in the caller's way of writing a time", () => {
    const [held] = jobsWaitingFor(event, [reading("notify.mail", { waiting: 1, paused: true })], none);
    expect(jobsWaitingText(held!, (d) => d.toISOString().slice(11, 16))).toBe(
      "1 notify.mail job waited with QStash delivery paused when the sweep read QStash at 12:01",
    );
  });
});
