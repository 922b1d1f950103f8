import { describe, expect, it } from "vitest";
import type { Receipt } from "../../src/outbox/index.ts";
import { pollLink } from "../../src/worker/respond.ts";

const entry = (id: string, state: "fanned" | "pending" | "poisoned") => ({
  id,
  type: "corpus.note.created",
  fannedOutAt: state === "fanned" ? new Date("2026-12-05T22:00:00Z") : null,
  fanout: state === "fanned" ? { "corpus.index": { messageId: `msg_${id}` } } : null,
  poisoned: state === "poisoned",
});

describe("a 202's Location", () => {
  it("names the first event still on its way, not the first event, which was often fanned out", () => {
    const receipt: Receipt = {
      complete: false,
      events: [
        entry("e1", "fanned"),
        entry("e2", "poisoned"),
        entry("e3", "pending"),
        entry("e4", "pending"),
      ],
    };
    expect(pollLink(["e1", "e2", "e3", "e4"], receipt)).toBe("/events/e3");
  });

  it("falls back to the first event when the receipt names none on its way", () => {
    expect(pollLink(["e1", "e2"], { complete: false, events: [] })).toBe("/events/e1");
  });
});
