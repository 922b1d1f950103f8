// What a relay pass allocates per row, planning and writing the mark (issue 11 item 5).
// A Worker is billed and limited by CPU time, and in the relay's process most of the
// CPU that was its own went to garbage collection of what planning and the mark's
// text allocated (docs/performance.md). Counted in bytes by V8's sampling heap
// profiler, collected objects included, not timed: the bytes a piece of code
// allocates do not depend on the machine's load. The budgets sit between what this
// code allocates and what it allocated before (given beside each), with room for
// sampling error and V8 versions on either side.
import { Session } from "node:inspector/promises";
import { describe, expect, it } from "vitest";
import { defineSubscriptions, type ClaimedEvent } from "../../src/outbox/index.ts";
import { markAndCommit, type RowOutcome } from "../../src/outbox/relay/mark.ts";
import { planBatch } from "../../src/outbox/relay/plan.ts";
import type { SqlClient } from "../../src/outbox/sql.ts";

interface ProfileNode {
  selfSize: number;
  children: ProfileNode[];
}

/** Bytes `run` allocates, sampled every 128 bytes on average, after `warm` unmeasured runs (so the JIT has settled). */
async function allocated(run: () => unknown, warm = 30, measured = 20): Promise<number> {
  for (let i = 0; i < warm; i++) await run();
  const session = new Session();
  session.connect();
  try {
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 128,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
    for (let i = 0; i < measured; i++) await run();
    const { profile } = (await session.post("HeapProfiler.stopSampling")) as unknown as {
      profile: { head: ProfileNode };
    };
    const sum = (node: ProfileNode): number => node.selfSize + node.children.reduce((s, c) => s + sum(c), 0);
    return sum(profile.head) / measured;
  } finally {
    session.disconnect();
  }
}

// The bench's shape: every event matches both subscriptions, one of them coalescing,
// and runs of 4 events share a subject (1.25 jobs per event).
const subscriptions = defineSubscriptions([
  { name: "mail", types: ["*"] },
  { name: "index", types: ["*"], coalesce: true },
]);
const ROWS = 200;

function claimed(): ClaimedEvent[] {
  return Array.from({ length: ROWS }, (_, i) => {
    const id = `0190a4b2-7c3d-7e8f-9a0b-${String(i).padStart(12, "0")}`;
    const subject = `subject-${Math.floor(i / 4)}`;
    const scope = `tenant-${Math.floor(i / 4) % 10}`;
    const payload = { n: i, pad: "x".repeat(150) };
    const createdAt = new Date(Date.UTC(2026, 11, 3, 12, 0, 0, i)).toISOString();
    const eventJson = JSON.stringify({
      id,
      seq: i + 1,
      type: "bench.happened",
      subject,
      scope,
      payload,
      createdAt,
    });
    return {
      seq: i + 1,
      id,
      type: "bench.happened",
      subject,
      scope,
      payload,
      eventJson,
      createdAt: new Date(createdAt),
      attempts: 0,
    };
  });
}

describe("a relay pass's allocations per row", () => {
  it("planning a batch allocates under 1.2 KB per row (about 900 bytes; 2.8 KB before issue 11's fourth round)", async () => {
    const events = claimed();
    const plans = planBatch(events, subscriptions, { coalesce: true, maxJobBytes: 1_000_000 });
    // The plan is the one the guarantees need: 250 jobs, one per subject for `index`.
    expect(plans.flatMap((p) => p.jobs)).toHaveLength(250);
    const perRow =
      (await allocated(() => planBatch(events, subscriptions, { coalesce: true, maxJobBytes: 1_000_000 }))) /
      ROWS;
    expect(perRow).toBeLessThan(1200);
  });

  it("writing the mark of a published batch allocates under 400 bytes per row (about 310; 590 before)", async () => {
    const events = claimed();
    const plans = planBatch(events, subscriptions, { coalesce: true, maxJobBytes: 1_000_000 });
    let n = 0;
    for (const plan of plans) {
      for (const job of plan.jobs)
        plan.fanout[job.subscription] = { messageId: `msg_${(n++).toString(36)}xyz` };
    }
    const outcomes: RowOutcome[] = plans.map((p) => ({ seq: p.event.seq, fanout: p.fanout }));
    let sent = "";
    // Stands in for the connection: the mark's text is what this measures, not the driver.
    const client: SqlClient = {
      query: (text: string) => {
        sent = text;
        return Promise.resolve([{ rows: [{ fanned: ROWS, failed: 0, poisoned: [] }], rowCount: 1 }]);
      },
      release: () => undefined,
    };
    const perRow = (await allocated(() => markAndCommit(client, outcomes, "SELECT 1", undefined))) / ROWS;
    expect(sent).toContain("unnest(");
    expect(perRow).toBeLessThan(400);
  });
});
