import { beforeEach, describe, expect, it } from "vitest";
import { defineSubscriptions, drain, type DrainResult } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents } from "../support/events.ts";
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
