import { createQStashWaitLists } from "../domain/subscription-backlog.ts";
import { subscriptions } from "../domain/subscriptions.ts";
import {
  drain,
  endRelayBackoff,
  runPass,
  RELAY_POLICY,
  subscriptionFlowControl,
  withCause,
  type RelayOptions,
} from "../outbox/index.ts";
import { intOption, Refusal, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { readVariables, relayVariables } from "./config.ts";
import { DescribedFailure, describeFailure } from "./failure.ts";
import { formatDrain, formatPass } from "./format.ts";
import { passBackoffFor, publisherFor } from "../worker/relay.ts";

/** How long the check below waits for QStash's answer. */
const QSTASH_CHECK_MS = 10_000;

/**
 * One cheap authenticated request to QStash (the wait list of the first
 * subscription's flow-control key; a key it does not know is its 404, which is an
 * answer) before any pass. A pass whose publish fails backs off every relay, the
 * Worker's too (ADR 0003): a terminal with a wrong QSTASH_URL or token held
 * production passes back by up to the backoff cap. Such a terminal is told so here,
 * and nothing is claimed. A QStash that is really down is the Worker's passes' to
 * record. Fetched directly (createQStashWaitLists): the SDK printed its own
 * "[Upstash QStash] … failed" line on stderr before this refusal.
 */
async function checkQStash(env: {
  QSTASH_URL: string;
  QSTASH_TOKEN: string;
  PUBLIC_URL: string;
}): Promise<void> {
  const waitLists = createQStashWaitLists({
    baseUrl: env.QSTASH_URL,
    token: env.QSTASH_TOKEN,
    timeoutMs: QSTASH_CHECK_MS,
  });
  try {
    await waitLists.get(subscriptionFlowControl(env.PUBLIC_URL, subscriptions[0]!.name, 1).key);
  } catch (error) {
    throw new Refusal(
      "qstash_unreachable",
      `QStash at ${env.QSTASH_URL} did not take this terminal's request (${withCause(error)}): ` +
        "check QSTASH_URL and QSTASH_TOKEN; no pass ran, and the relay's shared state is as it was",
    );
  }
}

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
    await checkQStash(env);
    if (options.now) {
      // Only after QStash answered this terminal: ending the backoff for a QStash
      // still down would cost one failed pass, which backs off as long again.
      const was = await endRelayBackoff(pool);
      process.stderr.write(
        was
          ? `relay: ended the backoff that lasted until ${was.toISOString()} (--now; QStash answered this terminal)\n`
          : "relay: not backed off (--now changed nothing)\n",
      );
    }
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
