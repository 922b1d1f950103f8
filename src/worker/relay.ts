import {
  createQStashPublisher,
  drain,
  RELAY_POLICY,
  type DrainResult,
  type ExponentialBackoff,
  type FannedEvent,
  type Publisher,
  type SqlPool,
} from "../outbox/index.ts";
import { subscriptions } from "../domain/subscriptions.ts";
import { qstashLabelFor, type Config } from "./env.ts";

/**
 * A kick may run this long after its response. Workers give waitUntil work about
 * 30 s after the response; stopping starting passes at 20 s leaves a started pass
 * room to finish (a pass that is cut off is only replayed, never lost).
 */
export const KICK_BUDGET_MS = 20_000;

/**
 * The cron sweep's budget: a scheduled invocation on the free plan may run for
 * 30 s of wall time; maintenance runs after the drain, so the drain stops early.
 */
export const SWEEP_BUDGET_MS = 25_000;

/** The relay's publisher, for the Worker and the CLI alike. */
export function publisherFor(
  config: Pick<
    Config,
    "QSTASH_URL" | "QSTASH_TOKEN" | "PUBLIC_URL" | "QSTASH_BATCH_MESSAGES" | "QSTASH_LABEL"
  >,
): Publisher {
  return createQStashPublisher({
    baseUrl: config.QSTASH_URL,
    token: config.QSTASH_TOKEN,
    publicUrl: config.PUBLIC_URL,
    chunkSize: config.QSTASH_BATCH_MESSAGES,
    label: qstashLabelFor(config),
  });
}

/** The relay's backoff after a failed pass: the policy's curve, up to the deployment's cap. */
export function passBackoffFor(config: Pick<Config, "RELAY_BACKOFF_CAP_SECONDS">): ExponentialBackoff {
  return { ...RELAY_POLICY.passBackoff, capSeconds: config.RELAY_BACKOFF_CAP_SECONDS };
}

/** What a kick did, and how its passes fanned out the events it was asked to watch. */
export interface KickResult extends DrainResult {
  fannedEvents: FannedEvent[];
}

/**
 * The relay pass a write kicks after it commits: one pass, and more only while
 * the claims come back full (a bulk import), so a single write costs one pass.
 * Never rejects: a failed kick is logged and the cron sweep covers it.
 * `watch`: event ids (the write's) whose fan-out the result keeps, for the
 * write's receipt; only those, since a kick that meets a backlog drains it.
 */
export async function kickRelay(
  pool: SqlPool,
  config: Config,
  watch: readonly string[] = [],
): Promise<KickResult | null> {
  const watched = new Set(watch);
  const fannedEvents: FannedEvent[] = [];
  try {
    const result = await drain({
      pool,
      publisher: publisherFor(config),
      subscriptions,
      passBackoff: passBackoffFor(config),
      budgetMs: KICK_BUDGET_MS,
      until: "not-full",
      onPass: (pass) => {
        if (watched.size === 0) return;
        for (const e of pass.fannedEvents) if (watched.has(e.id)) fannedEvents.push(e);
      },
    });
    return { ...result, fannedEvents };
  } catch (error) {
    console.error("relay kick failed (the cron sweep will cover it):", (error as Error).message);
    return null;
  }
}
