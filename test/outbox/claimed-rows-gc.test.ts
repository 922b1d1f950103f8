// The relay's claimed rows must die young (issue 11's sixth round). Sent through the
// drivers' promise form, nearly every row of every claim outlived a young-generation
// collection and was copied into the old generation; that copying was about a third
// of the relay's CPU per event in the bench. send() (src/outbox/sql.ts) takes the callback form instead. Counted
// in bytes by V8's sampling heap profiler over real drains against real Postgres, each
// in a process of its own, not timed: what survives a scavenge does not depend on the
// machine's load, though it does vary from one process to the next, so each drain runs
// three times and the best run counts: 103 to 320 bytes per row with send(), 917 to
// 1,018 through the promise form (drain-survivors.ts's `promise` argument).
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { beforeEach, describe, expect, it } from "vitest";
import { send, type SqlClient } from "../../src/outbox/sql.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents, unfannedCount } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

const EVENTS = 30_000;

/** Bytes per claimed row that outlived a scavenge, in the best of three drains of EVENTS events. */
async function survivedPerRow(): Promise<number> {
  const script = fileURLToPath(new URL("../support/drain-survivors.ts", import.meta.url));
  const runs: number[] = [];
  for (let run = 0; run < 3; run++) {
    await resetOutbox(t.pool);
    await seedEvents(t.pool, EVENTS, { payloadBytes: 200, subject: (i) => `subject-${Math.ceil(i / 4)}` });
    const child = spawn(process.execPath, ["--import", "tsx", script, t.url], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(code, err).toBe(0);
    const { fanned, rows, survivedBytes } = JSON.parse(out.trim()) as Record<string, number>;
    expect(fanned).toBe(EVENTS);
    expect(await unfannedCount(t.pool)).toBe(0);
    // Passes 21 to the end: most of the drain.
    expect(rows).toBeGreaterThan(EVENTS * 0.75);
    runs.push(survivedBytes! / rows!);
  }
  return Math.min(...runs);
}

describe("the relay's claimed rows die young", () => {
  it("a drain keeps under 600 bytes per claimed row past a young-generation collection (100-320; 920-1,020 through the promise form)", async () => {
    expect(await survivedPerRow()).toBeLessThan(600);
  }, 120_000);
});

describe("send()", () => {
  it("answers through the callback form of a pg client, and rejects with its error", async () => {
    const client = await t.pool.connect();
    try {
      const forms: string[] = [];
      const spied = {
        ...client,
        query: (text: string, arg?: unknown) => {
          forms.push(typeof arg === "function" ? "callback" : "promise");
          return client.query(text, arg as never);
        },
      } as unknown as SqlClient;
      const raw = (await send(spied, "SELECT 1 AS one; SELECT 2 AS two")) as { rows: unknown[] }[];
      expect(raw.map((r) => r.rows)).toEqual([[{ one: 1 }], [{ two: 2 }]]);
      await expect(send(spied, "SELECT 1/0")).rejects.toThrow(/division by zero/);
      expect(forms).toEqual(["callback", "callback"]);
    } finally {
      client.release();
    }
  });

  it("takes the promise of a client that knows only the promise form", async () => {
    const promiseOnly: SqlClient = {
      query: (text: string) => t.pool.query(text),
      release: () => undefined,
    };
    const raw = (await send(promiseOnly, "SELECT 3 AS three")) as { rows: unknown[] };
    expect(raw.rows).toEqual([{ three: 3 }]);
    await expect(send(promiseOnly, "SELECT nope")).rejects.toThrow(/nope/);
  });
});
