import type pg from "pg";
import { beforeEach, describe, expect, it } from "vitest";
import { drain, openPasses, runPass, type SqlClient, type SqlPool } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

// ADR 0022: a drain sends each pass's mark and COMMIT with the next pass's BEGIN and
// claim, so n passes cost n + 1 round trips. These tests hold it to that count, and
// to what a claim sent ahead must not change: its rows stay locked until its own
// pass, go back when nobody runs it, and a failure after the commit loses nothing.

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

/** Every text the relay sent, one entry per round trip; `rewrite` may change a text on its way. */
function recordingPool(pool: pg.Pool, rewrite: (text: string) => string = (text) => text) {
  const sent: string[] = [];
  const recording: SqlPool = {
    async connect() {
      const client = await pool.connect();
      const wrapped: SqlClient = {
        query: (text: string) => {
          sent.push(text);
          return client.query(rewrite(text));
        },
        release: (destroy) => client.release(destroy),
        on: (event, listener) => client.on(event, listener),
        off: (event, listener) => client.off(event, listener),
      };
      return wrapped;
    },
  };
  return { pool: recording, sent };
}

/** Round trips that carried a claim (BEGIN travels with every claim, and only with one). */
const claims = (sent: string[]) => sent.filter((text) => /\bBEGIN;/.test(text)).length;

/** Every (event, subscription) the publisher accepted exactly once, and no row left unfanned. */
async function fannedOnce(publisher: RecordingPublisher, events: number): Promise<void> {
  const counts = [...publisher.countsByDeduplicationId().values()];
  expect(counts).toHaveLength(events);
  expect(counts.every((n) => n === 1)).toBe(true);
  expect(await unfannedCount(t.pool)).toBe(0);
}

describe("a drain sends the next claim with each commit", () => {
  it("drains 450 events in 4 passes and 5 round trips, where separate passes took 8", async () => {
    await seedEvents(t.pool, 450);
    const { pool, sent } = recordingPool(t.newPool(1));
    const publisher = new RecordingPublisher();
    const passes: number[] = [];

    const result = await drain({
      pool,
      publisher,
      subscriptions: everything,
      budgetMs: 60_000,
      onPass: (pass) => passes.push(pass.claimed),
    });

    expect(passes).toEqual([200, 200, 50, 0]);
    expect(result).toMatchObject({ passes: 4, fanned: 450, stoppedBecause: "drained" });
    expect(sent).toHaveLength(5);
    // The first claim alone; three commits each followed by a claim; the empty claim's rollback.
    expect(claims(sent)).toBe(4);
    expect(sent.slice(1, 4).every((text) => /COMMIT;\s*BEGIN;/.test(text))).toBe(true);
    expect(sent[4]).toBe("ROLLBACK");
    await fannedOnce(publisher, 450);

    // A single pass is still its own claim and its own commit.
    await seedEvents(t.pool, 3);
    sent.length = 0;
    await runPass({ pool, publisher, subscriptions: everything });
    expect(sent).toHaveLength(2);
    expect(claims(sent)).toBe(1);
    expect(sent[1]).toMatch(/COMMIT;\s*$/);
  });

  it("claims nothing ahead of a pass it will not run: not-full kicks, pass limits, spent budgets", async () => {
    await seedEvents(t.pool, 450);
    const kick = recordingPool(t.newPool(1));
    const kickPasses: number[] = [];
    await drain({
      pool: kick.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      budgetMs: 60_000,
      until: "not-full",
      onPass: (pass) => kickPasses.push(pass.claimed),
    });
    expect(kickPasses).toEqual([200, 200, 50]);
    // claim; commit + claim; commit + claim; commit: no claim after the pass that was not full.
    expect(kick.sent).toHaveLength(4);
    expect(claims(kick.sent)).toBe(3);

    await resetOutbox(t.pool);
    await seedEvents(t.pool, 800);
    const limited = recordingPool(t.newPool(1));
    const twoPasses = await drain({
      pool: limited.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      budgetMs: 60_000,
      maxPasses: 2,
    });
    expect(twoPasses).toMatchObject({ passes: 2, fanned: 400, stoppedBecause: "max-passes" });
    expect(limited.sent).toHaveLength(3);
    expect(claims(limited.sent)).toBe(2);

    const spent = recordingPool(t.newPool(1));
    const noBudget = await drain({
      pool: spent.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      budgetMs: 0,
    });
    expect(noBudget).toMatchObject({ passes: 1, fanned: 200, stoppedBecause: "budget" });
    expect(spent.sent).toHaveLength(2);
    // What the two drains left is neither claimed nor locked: a pass on another
    // connection takes all of it (SKIP LOCKED would pass a locked row by).
    const rest = await runPass({
      pool: t.newPool(1),
      publisher: new RecordingPublisher(),
      subscriptions: everything,
    });
    expect(rest.claimed).toBe(200);
    expect(await unfannedCount(t.pool)).toBe(0);
  });
});

describe("a claim sent ahead", () => {
  it("keeps its rows locked until its pass: another relay skips them meanwhile", async () => {
    const ids = await seedEvents(t.pool, 600);
    const publisher = new RecordingPublisher();
    const session = await openPasses({ pool: t.newPool(1), publisher, subscriptions: everything });
    try {
      const first = await session.run(() => true);
      expect(first.claimed).toBe(200);
      expect(session.claimed).toBe(true);

      // Rows 201-400 are claimed by the session, not yet published: SKIP LOCKED passes them by.
      const other = new RecordingPublisher();
      const concurrent = await runPass({ pool: t.newPool(1), publisher: other, subscriptions: everything });
      expect(concurrent.claimed).toBe(200);
      expect(other.eventIds("all")).toEqual(ids.slice(400, 600));

      const second = await session.run();
      expect(second.claimed).toBe(200);
      expect(publisher.eventIds("all")).toEqual(ids.slice(0, 400));
      expect(session.claimed).toBe(false);
    } finally {
      await session.close();
    }
    expect(await unfannedCount(t.pool)).toBe(0);
  });

  it("goes back when nobody runs it: closing rolls it back, and a drain that throws leaves nothing locked", async () => {
    const ids = await seedEvents(t.pool, 600);
    const session = await openPasses({
      pool: t.newPool(1),
      publisher: new RecordingPublisher(),
      subscriptions: everything,
    });
    await session.run(() => true);
    expect(session.claimed).toBe(true);
    await session.close();

    const after = new RecordingPublisher();
    // Rows still locked by the closed session would be skipped: the next pass must get exactly them.
    const next = await runPass({ pool: t.newPool(1), publisher: after, subscriptions: everything });
    expect(after.eventIds("all")).toEqual(ids.slice(200, 400));
    expect(next.claimed).toBe(200);

    // A drain whose pass callback throws after the first pass, with the next claim in hand.
    const publisher = new RecordingPublisher();
    await expect(
      drain({
        pool: t.newPool(1),
        publisher,
        subscriptions: everything,
        budgetMs: 60_000,
        batchSize: 100,
        onPass: () => {
          throw new Error("the caller gave up");
        },
      }),
    ).rejects.toThrow("the caller gave up");
    expect(publisher.eventIds("all")).toEqual(ids.slice(400, 500));
    // The rows the dead drain had claimed ahead (501-600) are free: a fresh drain fans them now.
    const rest = new RecordingPublisher();
    await drain({ pool: t.newPool(1), publisher: rest, subscriptions: everything, budgetMs: 60_000 });
    expect(rest.eventIds("all")).toEqual(ids.slice(500, 600));
    expect(await unfannedCount(t.pool)).toBe(0);
  });

  it("that fails after the commit loses nothing: the committed pass stays fanned and is not published again", async () => {
    const ids = await seedEvents(t.pool, 300);
    // The round trip that commits the first pass and claims the second fails after
    // its COMMIT, as a claim that hits a dropped connection or a timeout would.
    let broken = false;
    const { pool } = recordingPool(t.newPool(1), (text) => {
      if (!broken && /COMMIT;\s*BEGIN;/.test(text)) {
        broken = true;
        return `${text}\n    SELECT 1 / 0;`;
      }
      return text;
    });
    const publisher = new RecordingPublisher();
    await expect(drain({ pool, publisher, subscriptions: everything, budgetMs: 60_000 })).rejects.toThrow(
      /division by zero/,
    );
    expect(broken).toBe(true);

    const states = await eventStates(t.pool);
    const fanned = states.filter((s) => s.fanned_out_at !== null).map((s) => s.id);
    expect(fanned).toEqual(ids.slice(0, 200));

    const retry = new RecordingPublisher();
    await drain({ pool: t.newPool(1), publisher: retry, subscriptions: everything, budgetMs: 60_000 });
    expect(retry.eventIds("all")).toEqual(ids.slice(200, 300));
    const all = new RecordingPublisher();
    all.accepted.push(...publisher.accepted, ...retry.accepted);
    await fannedOnce(all, 300);
  });

  it("ends its session with the failure: no other pass runs on that connection", async () => {
    await seedEvents(t.pool, 300);
    const { pool } = recordingPool(t.newPool(1), (text) =>
      /COMMIT;\s*BEGIN;/.test(text) ? `${text}\n    SELECT 1 / 0;` : text,
    );
    const session = await openPasses({
      pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
    });
    try {
      await expect(session.run(() => true)).rejects.toThrow(/division by zero/);
      expect(session.claimed).toBe(false);
      await expect(session.run()).rejects.toThrow(/failed; open another/);
    } finally {
      await session.close();
    }
    // The failed round trip's commit held; its claim did not.
    expect(await unfannedCount(t.pool)).toBe(100);
  });
});
