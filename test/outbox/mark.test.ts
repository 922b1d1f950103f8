// The mark's two statement shapes (ADR 0012, 0014): a batch where every row published
// takes the compact one (fanout built in SQL from arrays), a batch with any failed row
// the general one (one jsonb document). Both must store the same fanout documents.
import { beforeEach, describe, expect, it } from "vitest";
import type { Fanout } from "../../src/outbox/index.ts";
import { clearFailuresSql } from "../../src/outbox/relay/backoff.ts";
import { markAndCommit, type RowOutcome } from "../../src/outbox/relay/mark.ts";
import { useTestDatabase } from "../support/db.ts";
import { eventStates, seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

async function mark(outcomes: RowOutcome[]) {
  const client = await t.pool.connect();
  try {
    await client.query("BEGIN");
    return await markAndCommit(client, outcomes, clearFailuresSql(undefined), undefined);
  } finally {
    client.release();
  }
}

/** Every kind of entry, and names and ids that need quoting in SQL and in an array literal. */
function fanouts(ids: string[]): Fanout[] {
  return [
    { mail: { messageId: "msg_1" }, index: { coalescedInto: ids[2]! } },
    { mail: { messageId: "msg_2", deduplicated: true }, 'it\'s "odd"\\': { messageId: 'a"b\\c,{d} NULL' } },
    { mail: { messageId: "NULL" }, index: { messageId: "msg_3" } },
    {},
    { index: { messageId: "msg_4 with spaces" } },
  ];
}

describe("the mark", () => {
  it("stores the same fanout documents whether or not the batch has a failed row", async () => {
    const ids = await seedEvents(t.pool, 12);
    const seqs = (await eventStates(t.pool)).map((e) => Number(e.seq));
    const compact = fanouts(ids.slice(0, 5));
    const general = fanouts(ids.slice(6, 11));

    const allPublished = await mark(compact.map((fanout, i) => ({ seq: seqs[i]!, fanout })));
    expect(allPublished).toMatchObject({ fanned: 5, failed: 0, poisoned: [] });
    const withFailure = await mark([
      ...general.map((fanout, i) => ({ seq: seqs[6 + i]!, fanout })),
      { seq: seqs[11]!, error: "rejected: 400" },
    ]);
    expect(withFailure).toMatchObject({ fanned: 5, failed: 1, poisoned: [] });

    const states = await eventStates(t.pool);
    expect(states.slice(0, 5).map((s) => s.fanout)).toEqual(compact);
    expect(states.slice(6, 11).map((s) => s.fanout)).toEqual(general);
    expect(states.slice(0, 5).every((s) => s.fanned_out_at !== null)).toBe(true);
    expect(states[5]).toMatchObject({ fanned_out_at: null, fanout: null });
    expect(states[11]).toMatchObject({ fanned_out_at: null, attempts: 1, last_error: "rejected: 400" });
  });

  it("marks a batch where no row matched any subscription", async () => {
    await seedEvents(t.pool, 2);
    const seqs = (await eventStates(t.pool)).map((e) => Number(e.seq));
    expect(await mark(seqs.map((seq) => ({ seq, fanout: {} })))).toMatchObject({ fanned: 2 });
    expect((await eventStates(t.pool)).map((s) => s.fanout)).toEqual([{}, {}]);
  });

  it("writes a batch of plain message ids as JSON text, storing what the general statement stores", async () => {
    const ids = await seedEvents(t.pool, 8);
    const seqs = (await eventStates(t.pool)).map((e) => Number(e.seq));
    // QStash-shaped ids, every kind of entry, a row without one subscription, one
    // with neither, names and ids with spaces and non-ASCII: nothing JSON escapes.
    const plain: Fanout[] = [
      {
        mail: { messageId: "msg_2mPqA9xYz" },
        "search index": { messageId: "msg_7-Kd_e", deduplicated: true },
      },
      { mail: { messageId: "msg_é 1" }, "search index": { coalescedInto: ids[0]! } },
      {},
      { "search index": { messageId: "NULL" } },
    ];
    const sent: string[] = [];
    const client = await t.pool.connect();
    try {
      await client.query("BEGIN");
      const recording = {
        query: (text: string) => {
          sent.push(text);
          return client.query(text);
        },
      };
      await markAndCommit(
        recording as unknown as typeof client,
        plain.map((fanout, i) => ({ seq: seqs[i]!, fanout })),
        clearFailuresSql(undefined),
        undefined,
      );
    } finally {
      client.release();
    }
    expect(sent.join("")).toContain("concat_ws");
    await mark([...plain.map((fanout, i) => ({ seq: seqs[4 + i]!, fanout })), { seq: 0, error: "x" }]);
    const states = await eventStates(t.pool);
    expect(states.slice(0, 4).map((s) => s.fanout)).toEqual(plain);
    expect(states.slice(4, 8).map((s) => s.fanout)).toEqual(plain);
    expect(states.map((s) => s.id)).toEqual(ids);
  });

  it("falls back to building each document when one id or name needs escaping, with the same result", async () => {
    await seedEvents(t.pool, 4);
    const seqs = (await eventStates(t.pool)).map((e) => Number(e.seq));
    const odd: Fanout[][] = [
      [{ mail: { messageId: 'msg_"quoted"' } }],
      [{ 'it\'s "odd"': { messageId: "msg_1" } }],
      [{ mail: { coalescedInto: 'x"y' } }],
      [{ mail: { messageId: "msg_back\\slash\n" } }],
    ];
    for (const [i, [fanout]] of odd.entries()) await mark([{ seq: seqs[i]!, fanout: fanout! }]);
    expect((await eventStates(t.pool)).map((s) => s.fanout)).toEqual(odd.map(([f]) => f));
  });

  it("reads the rows it marks through the primary key, where the join alone scanned the whole table", async () => {
    // 20,000 rows: below ~25,000 the planner hashed the mark's input and read every
    // row of events each pass, unless the statement named the seqs as a constant.
    await t.pool.query(
      `INSERT INTO events (type, subject, payload) SELECT 't.x', 's' || g, '{}' FROM generate_series(1, 20000) g`,
    );
    await t.pool.query("ANALYZE events");
    const seqs = Array.from({ length: 200 }, (_, i) => 10_001 + i);
    const stateSql = clearFailuresSql(undefined);
    // The statement as markAndCommit sends it, captured rather than run.
    const markStatement = async (outcomes: RowOutcome[]) => {
      let sent = "";
      await markAndCommit(
        {
          query: async (text: string) => {
            sent = text;
            return [];
          },
          release: () => undefined,
        },
        outcomes,
        stateSql,
        undefined,
      );
      return sent.slice(0, sent.indexOf(stateSql));
    };
    const compact = await markStatement(
      seqs.map((seq) => ({ seq, fanout: { mail: { messageId: `msg_${seq}` } } })),
    );
    const general = await markStatement(
      seqs.map((seq, i) =>
        i === 0 ? { seq, error: "boom" } : { seq, fanout: { mail: { messageId: `msg_${seq}` } } },
      ),
    );
    expect(compact).not.toContain("jsonb_to_recordset");
    expect(general).toContain("jsonb_to_recordset");
    for (const statement of [compact, general]) {
      const { rows } = await t.pool.query<{ "QUERY PLAN": string }>(`EXPLAIN ${statement}`);
      const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
      expect(plan).toContain("events_pkey");
      expect(plan).not.toMatch(/Seq Scan on events\b/);
    }
  });
});
