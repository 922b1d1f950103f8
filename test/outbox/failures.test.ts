import { beforeEach, describe, expect, it } from "vitest";
import {
  defineSubscriptions,
  drain,
  getEvent,
  listAlerts,
  runPass,
  requeue,
  stats,
  type Publisher,
} from "../../src/outbox/index.ts";
import { classifyPublishFailure, kindOfStatus } from "../../src/outbox/errors.ts";
import { raceAbort } from "../../src/outbox/relay/pass.ts";
import { RELAY_POLICY } from "../../src/outbox/relay/policy.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents, unfannedCount } from "../support/events.ts";
import { RecordingPublisher, outage, rejected } from "../support/publishers.ts";
import { everything, resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

const seconds = (from: Date, to: Date | null) =>
  to ? Math.round((to.getTime() - from.getTime()) / 1000) : null;
const at = (base: Date, s: number) => new Date(base.getTime() + s * 1000);

describe("one bad row never blocks the others", () => {
  it("poisons a row the transport rejects 5 times, fans the rest, and requeue brings it back", async () => {
    const ids = await seedEvents(t.pool, 10);
    const bad = ids[4]!;
    const publisher = new RecordingPublisher();
    publisher.fail = (jobs) =>
      jobs.some((j) => j.body.event.id === bad) ? rejected("body too weird") : undefined;
    const relay = { pool: t.pool, publisher, subscriptions: everything };
    let now = new Date(Date.now() + 1000);

    // The batch fails as a whole: nobody's fault yet, so no row is charged.
    const first = await runPass({ ...relay, now });
    expect(first).toMatchObject({ mode: "batch", fanned: 0, failed: 0 });
    expect(seconds(now, first.backedOffUntil)).toBe(2);
    expect((await eventStates(t.pool)).every((r) => r.attempts === 0)).toBe(true);
    expect(await runPass({ ...relay, now: at(now, 1) })).toMatchObject({ mode: "backed-off", claimed: 0 });

    // Row by row: the nine go through, the bad one is charged and waits its turn.
    now = first.backedOffUntil!;
    const isolated = await runPass({ ...relay, now });
    expect(isolated).toMatchObject({ mode: "rows", fanned: 9, failed: 1, backedOffUntil: null });
    expect(publisher.accepted.map((j) => j.body.event.id)).toEqual(ids.filter((id) => id !== bad));

    const waits: (number | null)[] = [];
    for (let attempt = 2; attempt <= 5; attempt++) {
      const row = (await eventStates(t.pool)).find((r) => r.id === bad)!;
      waits.push(seconds(now, row.next_attempt_at));
      now = row.next_attempt_at!;
      const batch = await runPass({ ...relay, now });
      expect(batch).toMatchObject({ mode: "batch", claimed: 1, fanned: 0 });
      now = batch.backedOffUntil!;
      const rows = await runPass({ ...relay, now });
      expect(rows).toMatchObject({ mode: "rows", failed: 1 });
      expect(rows.poisoned).toEqual(attempt === 5 ? [bad] : []);
    }
    expect(waits).toEqual([2, 4, 8, 16]);

    const poisoned = (await eventStates(t.pool)).find((r) => r.id === bad)!;
    expect(poisoned.attempts).toBe(5);
    expect(poisoned.poisoned_at).not.toBeNull();
    expect(poisoned.last_error).toMatch(/body too weird/);
    const alerts = await listAlerts(t.pool, { open: true });
    expect(alerts).toMatchObject([{ kind: "event.poisoned", eventId: bad }]);
    expect((await stats(t.pool)).poisoned).toBe(1);
    // Set aside: no later pass claims it.
    expect(await runPass({ ...relay, now: at(now, 3600) })).toMatchObject({ claimed: 0 });

    publisher.fail = undefined;
    expect(await requeue(t.pool, [bad, ids[0]!])).toEqual({
      requeued: [bad],
      notPoisoned: [ids[0]],
      unknown: [],
    });
    expect(await listAlerts(t.pool, { open: true })).toEqual([]);
    expect(await runPass({ ...relay, now: at(now, 3600) })).toMatchObject({ fanned: 1 });
    expect(await unfannedCount(t.pool)).toBe(0);
    expect((await getEvent(t.pool, bad))?.state).toBe("fanned");
  });

  it("charges a row whose subscription filter throws, in the same pass that fans the others", async () => {
    const ids = await seedEvents(t.pool, 3);
    const subscriptions = defineSubscriptions([
      {
        name: "picky",
        types: ["*"],
        filter: (e) => {
          if (e.id === ids[1]) throw new Error("cannot read this payload");
          return true;
        },
      },
    ]);
    const pass = await runPass({ pool: t.pool, publisher: new RecordingPublisher(), subscriptions });
    expect(pass).toMatchObject({ mode: "batch", fanned: 2, failed: 1, backedOffUntil: null });
    const row = (await eventStates(t.pool)).find((r) => r.id === ids[1])!;
    // A throwing filter may be fixed by a deploy: tried again, not poisoned yet.
    expect(row).toMatchObject({ attempts: 1, fanned_out_at: null, poisoned_at: null });
    expect(row.last_error).toMatch(/filter of picky threw: Error: cannot read this payload/);
  });

  it("poisons at once an event whose job is too large for the transport: no later try can send it", async () => {
    const [bigId] = await seedEvents(t.pool, 1, { payloadBytes: 5000 });
    await seedEvents(t.pool, 1);
    const pass = await runPass({
      pool: t.pool,
      publisher: new RecordingPublisher(),
      subscriptions: everything,
      maxJobBytes: 4000,
    });
    expect(pass).toMatchObject({ fanned: 1, failed: 1, poisoned: [bigId] });
    const [big] = await eventStates(t.pool);
    expect(big!.last_error).toMatch(/payload too large/);
    expect(big).toMatchObject({ attempts: 1 });
    expect(big!.poisoned_at).not.toBeNull();
    expect(await listAlerts(t.pool, { open: true })).toMatchObject([
      {
        kind: "event.poisoned",
        eventId: bigId,
        message: expect.stringMatching(
          /poisoned after 1 failure: EventError: job for all exceeds 4000 bytes \(payload too large\)$/,
        ),
      },
    ]);
  });
});

describe("a transport outage poisons nothing", () => {
  it("backs off 2 s, doubling to 60 s, and fans everything out once the transport is back", async () => {
    await seedEvents(t.pool, 40);
    const publisher = new RecordingPublisher();
    publisher.fail = () => outage(503);
    const relay = { pool: t.pool, publisher, subscriptions: everything };
    let now = new Date(Date.now() + 1000);

    const delays: (number | null)[] = [];
    for (let i = 0; i < 7; i++) {
      const pass = await runPass({ ...relay, now });
      expect(pass.error).toMatch(/transport down/);
      expect(pass.fanned + pass.failed).toBe(0);
      delays.push(seconds(now, pass.backedOffUntil));
      // Kicks in between are turned away without claiming.
      expect(await runPass({ ...relay, now: at(now, 1) })).toMatchObject({ mode: "backed-off", claimed: 0 });
      now = pass.backedOffUntil!;
    }
    expect(delays).toEqual([2, 4, 8, 16, 32, 60, 60]);
    const rows = await eventStates(t.pool);
    expect(rows.every((r) => r.attempts === 0 && r.poisoned_at === null && r.last_error === null)).toBe(true);
    expect(await listAlerts(t.pool)).toEqual([]);
    expect((await stats(t.pool)).relay).toMatchObject({
      failures: 7,
      lastError: expect.stringMatching(/503/),
    });

    // A drain (the sweep's) says which failure backed it off, or that none ran.
    const failedDrain = await drain({ ...relay, now, budgetMs: 30_000 });
    expect(failedDrain).toMatchObject({ passes: 1, claimed: 40, fanned: 0, stoppedBecause: "backoff" });
    expect(failedDrain.error).toMatch(/transport down/);
    const turnedAway = await drain({ ...relay, now: at(now, 1), budgetMs: 30_000 });
    expect(turnedAway).toMatchObject({ claimed: 0, stoppedBecause: "backoff" });
    expect(turnedAway.error).toBeUndefined();
    now = failedDrain.backedOffUntil!;

    publisher.fail = undefined;
    const result = await drain({ ...relay, now, budgetMs: 30_000 });
    expect(result).toMatchObject({ fanned: 40, failed: 0, stoppedBecause: "drained" });
    expect((await stats(t.pool)).relay).toMatchObject({ failures: 0, backoffUntil: null });
    expect(publisher.countsByDeduplicationId().size).toBe(40);
  });

  // Either limit cuts a publish that hangs: its own timeout, or the pass's deadline
  // passing while it is in flight (not only before the next publish starts).
  it.each([
    ["the publish timeout", { publishTimeoutMs: 300 }],
    ["the pass deadline", { publishTimeoutMs: 5_000, passTimeoutMs: 300 }],
  ] as const)(
    "gives up on a publish that hangs at %s, and releases the rows uncharged",
    async (_limit, limits) => {
      await seedEvents(t.pool, 3);
      const hanging: Publisher = { publish: () => new Promise(() => undefined) };
      const started = Date.now();
      const pass = await runPass({ pool: t.pool, publisher: hanging, subscriptions: everything, ...limits });
      expect(pass.error).toMatch(/publish gave up: TimeoutError: signal timed out after 300 ms/);
      expect(Date.now() - started).toBeLessThan(4_000);
      expect(pass.backedOffUntil).not.toBeNull();
      expect((await eventStates(t.pool)).every((r) => r.attempts === 0 && r.fanned_out_at === null)).toBe(
        true,
      );
      // Nothing holds the rows: a pass after the backoff claims all three.
      const later = at(pass.backedOffUntil!, 1);
      const next = await runPass({
        pool: t.pool,
        publisher: new RecordingPublisher(),
        subscriptions: everything,
        now: later,
      });
      expect(next).toMatchObject({ mode: "rows", fanned: 3 });
    },
  );

  it("stops a rows pass at its deadline though each publish is within its own timeout, charging no row", async () => {
    await seedEvents(t.pool, 10);
    // A rows pass, as after a failed one: one publish per row.
    await t.pool.query(`UPDATE outbox_relay_state SET failures = 1`);
    const publisher = new RecordingPublisher();
    publisher.delayMs = 100;
    const pass = await runPass({
      pool: t.pool,
      publisher,
      subscriptions: everything,
      publishTimeoutMs: 1_000,
      passTimeoutMs: 700,
    });
    // Ten publishes of 100 ms each would take 1 s: the pass deadline (700 ms) cuts
    // the one in flight, and no further row is tried. It is the pass's deadline, not
    // the publish's own timeout (1 s), that gave up.
    expect(pass).toMatchObject({ mode: "rows", claimed: 10, failed: 0, poisoned: [] });
    expect(pass.error).toMatch(/publish gave up: TimeoutError: signal timed out after 700 ms/);
    expect(pass.backedOffUntil).not.toBeNull();
    expect(pass.fanned).toBeGreaterThan(0);
    expect(pass.fanned).toBeLessThan(10);
    const rows = await eventStates(t.pool);
    // What was published before the deadline is marked; the rest is as it was, and
    // no row is charged for the relay giving up.
    expect(rows.filter((r) => r.fanned_out_at !== null)).toHaveLength(pass.fanned);
    expect(rows.slice(pass.fanned).every((r) => r.fanned_out_at === null && r.fanout === null)).toBe(true);
    expect(rows.every((r) => r.attempts === 0 && r.last_error === null)).toBe(true);
    expect(publisher.calls.length).toBeLessThanOrEqual(pass.fanned + 1);
  });

  it("a publish given a signal aborted already is refused, and its own rejection is handled", async () => {
    const unhandled: unknown[] = [];
    const listen = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", listen);
    try {
      const signal = AbortSignal.abort(new DOMException("signal timed out after 1 ms", "TimeoutError"));
      // As fetch does with an aborted signal: it rejects too, a moment later.
      const publish = new Promise<never>((_resolve, reject) =>
        setTimeout(() => reject(new Error("aborted by the caller")), 5),
      );
      await expect(raceAbort(publish, signal)).rejects.toThrow(/publish gave up: TimeoutError/);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", listen);
    }
  });

  it("a pass's default deadline stays far inside QStash's 10-minute deduplication window", () => {
    // A pass that dies after publishing is replayed with the same deduplication ids,
    // which QStash drops only within 10 minutes of the first publish: the dead pass's
    // rows stay locked until its deadline, and the replay comes after the relay's
    // backoff, so both together must leave the window a wide margin.
    const window = 10 * 60_000;
    expect(RELAY_POLICY.passTimeoutMs).toBeLessThanOrEqual(window / 5);
    expect(RELAY_POLICY.passTimeoutMs + RELAY_POLICY.passBackoff.capSeconds * 1000).toBeLessThanOrEqual(
      window / 4,
    );
    // One publish may not outlast the pass that makes it.
    expect(RELAY_POLICY.publishTimeoutMs).toBeLessThan(RELAY_POLICY.passTimeoutMs);
  });

  // kindOfStatus itself, not a publisher that hands the relay a ready-made verdict:
  // a wrong entry here poisons good rows (outage taken as rejection) or retries a
  // hopeless one forever (rejection taken as outage).
  it.each([
    [400, "rejected"],
    [401, "outage"],
    [403, "outage"],
    [404, "outage"],
    [408, "outage"],
    [413, "rejected"],
    [414, "rejected"],
    [422, "rejected"],
    [429, "outage"],
    [500, "outage"],
    [502, "outage"],
    [503, "outage"],
    [504, "outage"],
  ] as const)("classifies HTTP %i from the transport as %s", (status, kind) => {
    expect(kindOfStatus(status)).toBe(kind);
  });

  it("classifies a network failure (no status at all) as an outage", () => {
    expect(classifyPublishFailure(new TypeError("fetch failed"))).toBe("outage");
  });
});
