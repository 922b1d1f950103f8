import { parseArgs } from "node:util";
import { EVENT_STATES, RELAY_POLICY } from "../outbox/index.ts";

export const usage = `usage: npm run outbox -- <command> [options]

commands:
  migrate                         apply pending migrations
  relay once                      run one relay pass
  relay drain [--budget <s>]      run passes until nothing is claimable (default budget 300 s)
  events list [--state ${EVENT_STATES.join("|")}] [--type <glob>] [--limit <n>]
  events show <id>                an event: fan-out, last error, payload, alerts
  events requeue <id>...          put poisoned events back in line
  job-failures list [--limit <n>]
                                  jobs that exhausted their QStash retries, newest first
  job-failures retry <id>         publish a failed job again as a new job, once
  job-failures retry --all        the same for every failure not yet retried (after an outage)
  alerts [--open]                 recent alerts
  stats                           backlog, oldest pending age, poisoned count, relay backoff

options:
  --json                          machine-readable output
  --batch-size <n>                rows per relay pass (default ${RELAY_POLICY.batchSize})

environment (or .env): DATABASE_URL; for relay commands and job-failures retry also
QSTASH_TOKEN, PUBLIC_URL, QSTASH_URL (default https://qstash.upstash.io) and optionally
QSTASH_BATCH_MESSAGES (and for relay RELAY_BACKOFF_CAP_SECONDS), checked as the Worker checks
its bindings`;

/** Wrong arguments or environment: the CLI prints the usage and exits 2. */
export class UsageError extends Error {}

/** A variable missing or wrong: said in one line, without the usage text, which cannot help. */
export class ConfigError extends Error {}

export function parseCommandLine(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: "boolean", default: false },
        state: { type: "string" },
        type: { type: "string" },
        limit: { type: "string" },
        budget: { type: "string" },
        "batch-size": { type: "string" },
        open: { type: "boolean", default: false },
        all: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

export type Options = ReturnType<typeof parseCommandLine>["values"];

/** A whole-number option, digits only (`1e3`, `0x10` and ` 5` are not numbers here). */
export function intOption(raw: string | undefined, name: string, fallback: number, max = Infinity): number {
  if (raw === undefined) return fallback;
  const n = /^\d{1,9}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 1 && n <= max)) {
    const range = max === Infinity ? "a positive integer" : `an integer from 1 to ${max}`;
    throw new UsageError(`${name} must be ${range}, got "${raw}"`);
  }
  return n;
}
