import { describe, expect, it } from "vitest";
import { defineSubscriptions, matchesGlob } from "../../src/outbox/index.ts";
// An internal helper, tested where it lives rather than exported from the core.
import { globToLike } from "../../src/outbox/operations.ts";
import { planBatch } from "../../src/outbox/relay/plan.ts";
import type { ClaimedEvent } from "../../src/outbox/index.ts";

describe("event-type globs", () => {
  it.each([
    ["corpus.note.*", "corpus.note.created", true],
    ["corpus.note.*", "corpus.note.", true],
    ["corpus.note.*", "corpus.notes.created", false],
    ["supplier.*", "supplierx.connected", false],
    ["supplier.*", "supplier.connected", true],
    ["*", "anything.at.all", true],
    ["supplier.connected", "supplier.connected", true],
    ["supplier.connected", "supplier.connectedx", false],
    ["*.deleted", "corpus.note.deleted", true],
    ["a*a", "a", false],
    ["a*a", "aa", true],
    ["*note*", "corpus.note.created", true],
    ["corpus.*.created", "corpus.note.created", true],
    ["corpus.*.created", "corpus.created", false],
    ["a*b*c", "abc", true],
    ["a*b*c", "acb", false],
    ["a*b*c", "abcbc", true],
    ["*ab*ab", "xabab", true],
    ["*ab*ab", "xab", false],
    ["**", "", true],
    ["a**", "a", true],
  ])("%s matches %s: %s", (glob, type, expected) => {
    expect(matchesGlob(glob, type)).toBe(expected);
  });

  it("matches as an anchored regex of `.*` per star would, on every short glob and type", () => {
    const letters = ["a", "b", "*"];
    const words = (n: number, of: string[]): string[] =>
      n === 0 ? [""] : words(n - 1, of).flatMap((w) => of.map((l) => w + l));
    const globs = [0, 1, 2, 3, 4].flatMap((n) => words(n, letters));
    const types = [0, 1, 2, 3, 4].flatMap((n) => words(n, ["a", "b"]));
    for (const glob of globs) {
      const re = new RegExp(`^${glob.split("*").join(".*")}$`);
      for (const type of types) expect(matchesGlob(glob, type), `${glob} / ${type}`).toBe(re.test(type));
    }
  });

  it("answers a failing match of many stars at once (a regex backtracked for hours)", () => {
    expect(matchesGlob(`${"*".repeat(199)}z`, "corpus.note.created")).toBe(false);
    expect(matchesGlob(`${"a*".repeat(100)}z`, "a".repeat(200))).toBe(false);
    expect(matchesGlob(`${"a*".repeat(100)}`, "a".repeat(200))).toBe(true);
  });

  it("turns a glob into a LIKE pattern with LIKE's wildcards taken literally", () => {
    expect(globToLike("supplier.*")).toBe("supplier.%");
    expect(globToLike("a_b%c*")).toBe("a\\_b\\%c%");
  });
});

describe("defineSubscriptions", () => {
  it.each([
    [[{ name: "Bad Name", types: ["*"] }], /must match/],
    [[{ name: "_failed", types: ["*"] }], /must match|reserved/],
    [[{ name: "a", types: [] }], /matches no event types/],
    [[{ name: "a", types: ["supplier.?"] }], /type "supplier\.\?" must be an event-type glob/],
    // Event types are lower case (recordEvent): this glob could never match one.
    [[{ name: "a", types: ["Order.*"] }], /type "Order\.\*" must be an event-type glob: lower-case/],
    [[{ name: "a", types: ["*"], retries: -1 }], /retries/],
    [
      [
        { name: "a", types: ["*"] },
        { name: "a", types: ["x.y"] },
      ],
      /declared twice/,
    ],
  ])("rejects %j", (list, message) => {
    expect(() => defineSubscriptions(list)).toThrow(message);
  });
});

describe("planning a batch", () => {
  const event = (seq: number, subject: string, type = "supplier.changed"): ClaimedEvent => ({
    seq,
    id: `00000000-0000-4000-8000-${String(seq).padStart(12, "0")}`,
    type,
    subject,
    scope: null,
    payload: { seq },
    createdAt: new Date("2026-01-01T00:00:00Z"),
    attempts: 0,
  });
  const subs = defineSubscriptions([
    { name: "mail", types: ["supplier.*"] },
    { name: "index", types: ["*"], coalesce: true },
  ]);

  it("gives a coalescing subscription one job per subject, for the latest event, naming the ones it covers", () => {
    const plans = planBatch([event(1, "a"), event(2, "b"), event(3, "a"), event(4, "a")], subs, {
      coalesce: true,
      maxJobBytes: 1_000_000,
    });
    expect(plans.map((p) => p.jobs.map((j) => j.subscription))).toEqual([
      ["mail"],
      ["mail", "index"],
      ["mail"],
      ["mail", "index"],
    ]);
    expect(plans[3]!.jobs[1]!.body.coalesced).toEqual([plans[0]!.event.id, plans[2]!.event.id]);
    expect(plans[0]!.fanout).toEqual({ index: { coalescedInto: plans[3]!.event.id } });
    expect(plans[3]!.jobs[1]!.deduplicationId).toBe(`${plans[3]!.event.id}:index`);
  });

  it("does not coalesce when asked not to (rows retried one by one)", () => {
    const plans = planBatch([event(1, "a"), event(2, "a")], subs, {
      coalesce: false,
      maxJobBytes: 1_000_000,
    });
    expect(plans.map((p) => p.jobs.length)).toEqual([2, 2]);
  });

  it("keeps a failing row out of coalescing, so a healthy earlier event still gets its job", () => {
    const picky = defineSubscriptions([
      {
        name: "index",
        types: ["*"],
        coalesce: true,
        filter: (e) => {
          if (e.seq === 2) throw new Error("no");
          return true;
        },
      },
    ]);
    const plans = planBatch([event(1, "a"), event(2, "a")], picky, {
      coalesce: true,
      maxJobBytes: 1_000_000,
    });
    expect(plans[0]!.jobs).toHaveLength(1);
    expect(plans[1]!.error).toMatch(/filter of index threw/);
  });

  it("does not coalesce into a latest event whose own job is too large: the earlier events keep their jobs", () => {
    const big = { ...event(2, "a"), payload: { blob: "x".repeat(2000) } };
    const plans = planBatch([event(1, "a"), big], subs, { coalesce: true, maxJobBytes: 1500 });
    expect(plans[1]!.error).toMatch(/exceeds 1500 bytes/);
    expect(plans[1]!.jobs).toEqual([]);
    // The earlier event must not be marked covered by a job that is never published.
    expect(plans[0]!.fanout).toEqual({});
    expect(plans[0]!.jobs.map((j) => j.subscription)).toEqual(["mail", "index"]);
    expect(plans[0]!.jobs[1]!.body.coalesced).toEqual([]);
  });

  it("keeps each event's own job when coalescing would make the latest job too large", () => {
    const padded = (seq: number) => ({ ...event(seq, "a"), payload: { blob: "x".repeat(300) } });
    const one = planBatch([padded(1)], subs, { coalesce: true, maxJobBytes: 1_000_000 });
    const limit = new TextEncoder().encode(JSON.stringify(one[0]!.jobs[1]!.body)).length + 10;
    // Each job fits on its own; the latest's job naming the other 9 ids would not.
    const plans = planBatch(
      Array.from({ length: 10 }, (_, i) => padded(i + 1)),
      subs,
      { coalesce: true, maxJobBytes: limit },
    );
    expect(plans.every((p) => p.error === undefined)).toBe(true);
    expect(plans.every((p) => p.jobs.some((j) => j.subscription === "index"))).toBe(true);
    expect(plans.every((p) => p.fanout.index === undefined)).toBe(true);
  });
});
