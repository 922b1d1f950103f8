// Drains the backlog of the database at argv[2] with the null publisher, in a process
// of its own (as the bench runs a relay, away from the test runner's allocations),
// and prints one JSON line: the rows claimed while V8's sampling heap profiler ran and
// the bytes of what was allocated then and outlived a young-generation collection.
// argv[3] = "promise" hands the relay a client that knows only the drivers' promise
// form, for comparison with send()'s callback form (src/outbox/sql.ts).
import { Session } from "node:inspector/promises";
import pg from "pg";
import { createNullPublisher, defineSubscriptions, drain, type SqlPool } from "../../src/outbox/index.ts";

interface ProfileNode {
  selfSize: number;
  children: ProfileNode[];
}

const pool = new pg.Pool({ connectionString: process.argv[2], max: 1 });
const promiseOnly: SqlPool = {
  async connect() {
    const client = await pool.connect();
    return {
      query: (text: string) => client.query(text),
      release: (destroy?: boolean | Error) => client.release(destroy),
    };
  },
};
// The bench's shape: two subscriptions, one coalescing.
const subscriptions = defineSubscriptions([
  { name: "mail", types: ["*"] },
  { name: "index", types: ["*"], coalesce: true },
]);
const session = new Session();
session.connect();
let passes = 0;
let rows = 0;
let sampling: Promise<unknown> | undefined;
const result = await drain({
  pool: process.argv[3] === "promise" ? promiseOnly : pool,
  publisher: createNullPublisher(),
  subscriptions,
  batchSize: 200,
  budgetMs: 120_000,
  until: "empty",
  onPass(pass) {
    passes++;
    // The first passes compile the code: measured from the 20th on. Objects a
    // scavenge collected are left out, so what remains is what outlived one (or is
    // alive at the end: a pass's worth at most).
    if (passes === 20) {
      sampling = session.post("HeapProfiler.startSampling", {
        samplingInterval: 512,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: false,
      });
    } else if (passes > 20) {
      rows += pass.claimed;
    }
  },
});
await sampling;
const { profile } = (await session.post("HeapProfiler.stopSampling")) as unknown as {
  profile: { head: ProfileNode };
};
const sum = (node: ProfileNode): number => node.selfSize + node.children.reduce((s, c) => s + sum(c), 0);
session.disconnect();
await pool.end();
process.stdout.write(
  `${JSON.stringify({ fanned: result.fanned, rows, survivedBytes: sum(profile.head) })}\n`,
);
