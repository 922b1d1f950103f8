import { subscriptions } from "../domain/subscriptions.ts";
import { drain, runPass, RELAY_POLICY, type RelayOptions } from "../outbox/index.ts";
import { intOption, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { readVariables, relayVariables } from "./config.ts";
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
      return pass.error ? 1 : 0;
    }
    const progress = process.stderr.isTTY && !options.json;
    const started = Date.now();
    const result = await drain({
      ...relay,
      budgetMs,
      onPass: (_pass, totals) => {
        if (!progress) return;
        const rate = Math.round(totals.fanned / Math.max(0.001, (Date.now() - started) / 1000));
        process.stderr.write(`\rpasses ${totals.passes} · fanned ${totals.fanned} · ${rate} events/s   `);
      },
    });
    if (progress) process.stderr.write("\n");
    print(result, () => formatDrain(result));
    return result.stoppedBecause === "backoff" ? 1 : 0;
  };
};
