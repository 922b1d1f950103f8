// Runs one relay pass in a child process whose publisher accepts the jobs, prints
// their deduplication ids, and then kills its own process before the pass can
// commit: the closest thing to a Worker evicted mid-pass.
import pg from "pg";
import { runPass, type Publisher } from "../../src/outbox/index.ts";
import { everything } from "./relay.ts";

const pool = new pg.Pool({ connectionString: process.argv[2], max: 1 });
const publisher: Publisher = {
  async publish(jobs) {
    process.stdout.write(`${JSON.stringify(jobs.map((j) => j.deduplicationId))}\n`);
    process.kill(process.pid, "SIGKILL");
    return new Promise(() => undefined);
  },
};
await runPass({ pool, publisher, subscriptions: everything });
