import { beforeEach, describe, expect, it } from "vitest";
import { defineSubscriptions, drain, runPass, type DrainResult } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents } from "../support/events.ts";
import { waitFor } from "../support/helpers.ts";
import { RecordingPublisher } from "../support/publishers.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("concurrent relays", () => {
  it("never fan out twice: 4 relays on separate connections over 4,000 events", async () => {
    const n = 4000;
    // Runs of four events share a subject, so the coalescing subscription really folds some.
    await seedEvents(t.pool, n, { subject: (i) => `s-${Math.ceil(i / 4)}` });
    const subscriptions = defineSubscriptions([
      { name: "mail", types: ["*"] },
      { name: "hooks", types: ["test.*"] },
      { name: "index", types: ["*"], coalesce: true },
    ]);
    // One transport shared by all relays, as QStash is; a small delay inside the
    // claim lets the relays' transactions overlap.
    const publisher = new RecordingPublisher();
    publisher.delayMs = 2;
    const relays = Array.from({ length: 4 }, () => t.newPool(1));
    // Connected before the race starts, so a slow backend start cannot leave one relay out.
    await Promise.all(relays.map((pool) => pool.query("SELECT 1")));

    const results: DrainResult[] = await Promise.all(
      relays.map((pool) => drain({ pool, publisher, subscriptions, batchSize: 50, budgetMs: 120_000 })),
    );

    // Every relay did real work, so the passes really overlapped.
    expect(results.every((r) => r.fanned > 0)).toBe(true);
    expect(results.reduce((sum, r) => sum + r.fanned, 0)).toBe(n);

    const counts = publisher.countsByDeduplicationId();
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
    const rows = await eventStates(t.pool);
    expect(rows.every((r) => r.fanned_out_at !== null)).toBe(true);
    for (const sub of ["mail", "hooks"]) {
      expect(publisher.eventIds(sub).sort()).toEqual(rows.map((r) => r.id).sort());
    }
    // Coalesced: each event is covered exactly once, by its own job or the later job it was folded into.
    const covered = publisher.accepted
      .filter((j) => j.subscription === "index")
      .flatMap((j) => [j.body.event.id, ...j.body.coalesced]);
    expect(covered.length).toBe(n);
    expect(new Set(covered).size).toBe(n);
    const coalescedInto = rows.filter((r) => "coalescedInto" in (r.fanout!.index as object));
    expect(coalescedInto.length).toBeGreaterThan(0);
    // The fanout column names the very message each subscription got.
    const messageIds = new Set(
      rows.flatMap((r) => Object.values(r.fanout!).map((f) => (f as { messageId?: string }).messageId)),
    );
    expect(messageIds.size - (messageIds.has(undefined) ? 1 : 0)).toBe(publisher.accepted.length);
  });
});

describe("SKIP LOCKED", () => {
  it("a pass whose publish is stalled never holds up another pass: the second claims the next rows and commits first", async () => {
    const ids = await seedEvents(t.pool, 20);
    const subscriptions = defineSubscriptions([{ name: "all", types: ["*"] }]);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let stalled = false;
    // The first pass's transport accepts its jobs only when the test lets it.
    const stalling = new RecordingPublisher();
    stalling.afterAccept = async () => {
      stalled = true;
      await released;
    };
    const [first, second] = [t.newPool(1), t.newPool(1)];
    await Promise.all([first.query("SELECT 1"), second.query("SELECT 1")]);

    const firstPass = runPass({ pool: first, publisher: stalling, subscriptions, batchSize: 10 });
    try {
      await waitFor(() => stalled);
      // With plain FOR UPDATE this claim waits on the first pass's row locks until
      // its publish returns: the race below then ends with the lock wait seen.
      const other = new RecordingPublisher();
      const secondPass = runPass({ pool: second, publisher: other, subscriptions, batchSize: 10 });
      let settled = false;
      void secondPass.finally(() => (settled = true)).catch(() => undefined);
      const outcome = await Promise.race([
        secondPass,
        lockWaitSeen(() => settled).then(() => "blocked on a lock"),
      ]);
      expect(outcome).toMatchObject({ claimed: 10, fanned: 10 });
      expect(other.eventIds("all")).toEqual(ids.slice(10));
      // Committed while the first pass still holds its rows.
      const rows = await eventStates(t.pool);
      expect(rows.filter((r) => r.fanned_out_at !== null).map((r) => r.id)).toEqual(ids.slice(10));
    } finally {
      release();
    }
    expect(await firstPass).toMatchObject({ claimed: 10, fanned: 10 });
    expect(stalling.eventIds("all")).toEqual(ids.slice(0, 10));
  });
});

/** Resolves once some connection to this database waits on a lock, or once `stop()` holds (the race is over). */
async function lockWaitSeen(stop: () => boolean): Promise<void> {
  await waitFor(async () => {
    if (stop()) return true;
    const { rows } = await t.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    return rows[0]!.n > 0;
  }, 25_000);
}
