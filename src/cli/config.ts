import type { z } from "zod";
import { configSchema, parseVariables } from "../worker/env.ts";
import { ConfigError } from "./args.ts";

/** What every command needs; the Worker's rule for it. */
export const databaseVariables = configSchema.pick({ DATABASE_URL: true });

/** What the relay commands need: the same variables, defaults and checks as the Worker's. */
export const relayVariables = configSchema.pick({
  DATABASE_URL: true,
  QSTASH_URL: true,
  QSTASH_TOKEN: true,
  PUBLIC_URL: true,
  RELAY_BACKOFF_CAP_SECONDS: true,
  QSTASH_BATCH_MESSAGES: true,
  QSTASH_LABEL: true,
});

/** What publishing a job needs (`job-failures retry`): the relay's publisher, no more. */
export const publishVariables = configSchema.pick({
  DATABASE_URL: true,
  QSTASH_URL: true,
  QSTASH_TOKEN: true,
  PUBLIC_URL: true,
  QSTASH_BATCH_MESSAGES: true,
  QSTASH_LABEL: true,
});

/**
 * What re-sending a webhook delivery needs (`webhooks redeliver|recover|test`): the
 * publisher's variables and the retry schedule, whose length is the retries
 * QStash gives the deliver job, as the Worker publishes it.
 */
export const webhookPublishVariables = publishVariables.extend(
  configSchema.pick({ WEBHOOK_RETRY_SCHEDULE: true }).shape,
);

/** Reads variables from the environment (and .env), or says which are missing or wrong. */
export function readVariables<T extends z.ZodType>(schema: T, env = process.env): z.output<T> {
  const parsed = parseVariables(schema, env);
  if (parsed.ok) return parsed.config;
  const problems = parsed.problems.map((p) => `${p.name} ${p.missing ? "is not set" : p.message}`);
  throw new ConfigError(`${problems.join("; ")} (environment or .env)`);
}
