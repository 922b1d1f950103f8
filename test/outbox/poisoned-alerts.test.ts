import { beforeEach, describe, expect, it } from "vitest";
import {
  listAlerts,
  requeue,
  requeuePoisoned,
  resolveAlert,
  runPass,
  type AlertRow,
} from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, poisonEvents, seedEvents } from "../support/events.ts";
import { untilALockWait } from "../support/helpers.ts";
import { RecordingPublisher, rejected } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

// One open event.poisoned alert per event type (ADR 0044): a fault charged to every
// row poisons events by the thousand, and one alert each buried every other alert.

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

const details = (a: AlertRow | undefined) => a?.details as Record<string, unknown>;
/** The open event.poisoned alerts, by type. */
const openPoisoned = async () =>
  (await listAlerts(t.pool, { open: true }))
    .filter((a) => a.kind === "event.poisoned")
    .sort((x, y) => String(details(x).type).localeCompare(String(details(y).type)));

/** What the relay records of the publisher's refusal below. */
const ERROR = "PublishError: QStash 400: bad label";

/** Runs relay passes, an hour apart so every backoff has ended, until `ids` are poisoned. */
async function poisonByRelay(ids: string[], start: Date): Promise<Date> {
  const bad = new Set(ids);
  const publisher = new RecordingPublisher();
  publisher.fail = (jobs) => (jobs.some((j) => bad.has(j.body.event.id)) ? rejected("bad label") : undefined);
  let now = start;
  for (let pass = 0; pass < 40; pass++) {
    const states = await eventStates(t.pool);
    if (states.filter((r) => bad.has(r.id)).every((r) => r.poisoned_at !== null)) return now;
    await runPass({ pool: t.pool, publisher, subscriptions: everything, now });
    now = new Date(now.getTime() + 3_600_000);
  }
  throw new Error("the relay did not poison them in 40 passes");
}

describe("poisoned events raise one open alert per type", () => {
  it("counts a type's poisoned events in one alert naming the latest, across passes", async () => {
    const suppliers = await seedEvents(t.pool, 3, { type: "supplier.updated" });
    const notes = await seedEvents(t.pool, 2, { type: "note.created" });
    const start = new Date(Date.now() + 1000);
    const later = await poisonByRelay([...suppliers, ...notes], start);

    let [note, supplier] = await openPoisoned();
    expect([note?.message, supplier?.message]).toEqual([
      `2 events of type note.created were poisoned; the latest: event ${notes[1]} poisoned after 5 failures: ${ERROR}`,
      `3 events of type supplier.updated were poisoned; the latest: event ${suppliers[2]} poisoned after 5 failures: ${ERROR}`,
    ]);
    expect(supplier).toMatchObject({ eventId: suppliers[2] });
    expect(details(supplier)).toMatchObject({ type: "supplier.updated", count: 3, eventId: suppliers[2] });
    const firstAt = details(supplier).firstPoisonedAt;
    const poisonedAt = (await eventStates(t.pool)).find((r) => r.id === suppliers[0])!.poisoned_at!;
    // Dated as the rows are, never after them (the requeue reads "poisoned since").
    expect(Date.parse(firstAt as string)).toBeLessThanOrEqual(poisonedAt.getTime());
    expect(poisonedAt.getTime() - Date.parse(firstAt as string)).toBeLessThan(1);

    // A later pass's poisoning of the type folds in: counted, latest named, first kept.
    const [fourth] = await seedEvents(t.pool, 1, { type: "supplier.updated" });
    await poisonByRelay([fourth!], later);
    [note, supplier] = await openPoisoned();
    expect(supplier?.eventId).toBe(fourth);
    expect(details(supplier)).toMatchObject({ count: 4, eventId: fourth, firstPoisonedAt: firstAt });
    expect(details(supplier).lastPoisonedAt).not.toBe(firstAt);
    expect(supplier?.message).toMatch(
      /^4 events of type supplier\.updated were poisoned; the latest: event /,
    );
    expect(details(note)).toMatchObject({ count: 2 });
  });

  it("reads as before for one event", async () => {
    const [only] = await seedEvents(t.pool, 1, { type: "supplier.updated" });
    await poisonByRelay([only!], new Date(Date.now() + 1000));
    const [alert] = await openPoisoned();
    expect(alert?.message).toBe(`event ${only} (supplier.updated) poisoned after 5 failures: ${ERROR}`);
    expect(details(alert)).toMatchObject({ count: 1, attempts: 5, lastError: ERROR });
  });
});

describe("a requeue resolves a type's alert once none it counts is still poisoned", () => {
  it("leaves it open while some are poisoned, and resolves it saying so when the last goes back", async () => {
    const suppliers = await seedEvents(t.pool, 4, { type: "supplier.updated" });
    const notes = await seedEvents(t.pool, 1, { type: "note.created" });
    await poisonEvents(t.pool, [...suppliers, ...notes], "2026-12-07T10:00:00Z");

    expect((await requeue(t.pool, [suppliers[3]!])).requeued).toEqual([suppliers[3]]);
    expect((await openPoisoned()).map((a) => details(a).type)).toEqual(["note.created", "supplier.updated"]);

    // The rest of them, as "Requeue all" does, of that type.
    expect(await requeuePoisoned(t.pool, { upTo: "2026-12-07T10:00:00Z", type: "supplier.*" })).toEqual({
      requeued: 3,
      more: false,
    });
    expect((await openPoisoned()).map((a) => details(a).type)).toEqual(["note.created"]);
    const [resolved] = (await listAlerts(t.pool)).filter((a) => details(a).type === "supplier.updated");
    expect(resolved?.message).toMatch(/were poisoned; .*; resolved: every event it counted was requeued$/);
    expect(details(resolved)).toMatchObject({ resolvedBy: "requeue", count: 4 });
  });

  it("counts only the events poisoned since it was raised", async () => {
    const [old, recent] = await seedEvents(t.pool, 2, { type: "supplier.updated" });
    await poisonEvents(t.pool, [old!], "2026-12-07T09:00:00Z");
    // The operator looked and left that one poisoned (its payload cannot be sent).
    const [first] = await openPoisoned();
    await resolveAlert(t.pool, first!.id);

    await poisonEvents(t.pool, [recent!], "2026-12-07T10:00:00Z");
    await requeue(t.pool, [recent!]);
    expect(await openPoisoned()).toEqual([]);
    expect((await eventStates(t.pool)).find((r) => r.id === old)?.poisoned_at).not.toBeNull();
  });

  it("leaves it open when a relay poisons another of the type while the requeue runs", async () => {
    const [a, b, c] = await seedEvents(t.pool, 3, { type: "supplier.updated" });
    await poisonEvents(t.pool, [a!, b!], "2026-12-07T10:00:00Z");

    // A relay's mark poisons c and folds it into the alert, and has not committed.
    const relay = await t.pool.connect();
    try {
      await relay.query("BEGIN");
      await poisonEvents(relay, [c!], "2026-12-07T10:05:00Z");
      // The requeue's snapshot sees a and b as the only poisoned events of the type.
      const requeueing = requeue(t.pool, [a!, b!]);
      await untilALockWait(t.pool);
      await relay.query("COMMIT");
      expect((await requeueing).requeued.sort()).toEqual([a, b].sort());
    } finally {
      relay.release();
    }
    const [open] = await openPoisoned();
    expect(open).toMatchObject({ eventId: c, resolvedAt: null });
    expect(details(open)).toMatchObject({ count: 3 });
  });

  it("raises one alert when two relays poison events of a type at once", async () => {
    const [a, b] = await seedEvents(t.pool, 2, { type: "supplier.updated" });
    const first = await t.pool.connect();
    const second = await t.pool.connect();
    try {
      await first.query("BEGIN");
      await second.query("BEGIN");
      await poisonEvents(first, [a!], "2026-12-07T10:00:00Z");
      // Waits on the first's uncommitted alert in the unique index, then folds into it.
      const raising = poisonEvents(second, [b!], "2026-12-07T10:00:01Z");
      await untilALockWait(t.pool);
      await first.query("COMMIT");
      await raising;
      await second.query("COMMIT");
    } finally {
      first.release();
      second.release();
    }
    const alerts = await openPoisoned();
    expect(alerts).toHaveLength(1);
    expect(details(alerts[0])).toMatchObject({ count: 2, eventId: b });
  });
});
