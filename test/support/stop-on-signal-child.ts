// Child process for test/bench/stop-on-signal.test.ts: wrangler's import-time signal
// listeners, one added before the guard and one after it (as miniflare adds its own
// when a Worker starts), and a `stop` that takes a while, or never ends ("hang").
import { setTimeout as sleep } from "node:timers/promises";
import { stopOnSignal } from "../../bench/support/progress.ts";

const hang = process.argv[2] === "hang";
const foreign = (name: string) => () => {
  process.stdout.write(`${name}\n`);
  process.exit(); // as wrangler's own listener does: the code is process.exitCode
};
// Added first, so it runs (and exits) first of the listeners handed over.
process.on("SIGINT", foreign("early"));
// The bench scripts import wrangler through the stack; it adds SIGINT and SIGTERM listeners.
await import("../../infra/workerd-stack.ts");
stopOnSignal(async () => {
  if (hang) await new Promise(() => undefined);
  await sleep(300);
  process.stdout.write("stopped\n");
}, 1_000);
process.once("SIGINT", foreign("late"));
process.stdout.write("ready\n");
setInterval(() => undefined, 1_000);
