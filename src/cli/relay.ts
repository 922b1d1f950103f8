import { subscriptions } from "../domain/subscriptions.ts";
import { drain, runPass, RELAY_POLICY, type RelayOptions } from "../outbox/index.ts";
import { intOption, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { readVariables, relayVariables } from "./config.ts";
import { DescribedFailure, describeFailure } from "./failure.ts";
import { formatDrain, formatPass } from "./format.ts";
import { passBackoffFor, publisherFor } from "../worker/relay.ts";

/** `relay once` and `relay drain`: the same pass the Worker runs, from a terminal. */
export const relayCommand: Command = ({ options, sub, rest }) => {
  if (sub !== "once" && sub !== "drain") {
    throw new UsageError(
      sub === undefined
        ? "relay needs a command: once or drain"
        : `unknown relay command "${sub}" (once, drain)`,
    );
  }
  if (rest.length > 0) throw new UsageError(`relay ${sub} takes no argument, got "${rest[0]}"`);
  if (sub === "once" && options.budget !== undefined) throw new UsageError("--budget is for relay drain");
  const batchSize = intOption(options["batch-size"], "--batch-size", RELAY_POLICY.batchSize);
  const budgetMs = intOption(options.budget, "--budget", 300) * 1000;
  return async ({ pool, print }) => {
    const env = readVariables(relayVariables);
    const relay: RelayOptions = {
      pool,
      publisher: publisherFor(env),
      subscriptions,
      passBackoff: passBackoffFor(env),
      batchSize,
    };
    if (sub === "once") {
      const pass = await runPass(relay);
      print(pass, () => formatPass(pass));
      // Backed off is no pass run: a script checking `relay once` during an outage read
      // 0 where `relay drain` answers 1.
      return pass.error || pass.mode === "backed-off" ? 1 : 0;
    }
    const progress = process.stderr.isTTY && !options.json;
    const started = Date.now();
    let done = { passes: 0, fanned: 0 };
    const result = await drain({
      ...relay,
      budgetMs,
      onPass: (_pass, totals) => {
        done = totals;
        if (!progress) return;
        const rate = Math.round(totals.fanned / Math.max(0.001, (Date.now() - started) / 1000));
        process.stderr.write(`\rpasses ${totals.passes} · fanned ${totals.fanned} · ${rate} events/s   `);
      },
    }).catch((error: unknown) => {
      if (progress) process.stderr.write("\n");
      // What the committed passes did stands; the pass that failed rolled back, its rows still pending.
      throw new DescribedFailure(
        `relay drain stopped after ${done.passes} pass${done.passes === 1 ? "" : "es"} (fanned ${done.fanned}): ${describeFailure(error)}`,
        { cause: error },
      );
    });
    if (progress) process.stderr.write("\n");
    print(result, () => formatDrain(result));
    return result.stoppedBecause === "backoff" ? 1 : 0;
  };
};
