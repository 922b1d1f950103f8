// Operator CLI: `npm run outbox -- <command>`. See `usage` below.
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import pg from "pg";
import { migrateDatabase } from "../node/postgres.ts";
import { subscriptions } from "../domain/subscriptions.ts";
import {
  InvalidInputError,
  createQStashPublisher,
  drain,
  getEvent,
  listAlerts,
  listEvents,
  requeue,
  runPass,
  RELAY_POLICY,
  isEventState,
  EVENT_STATES,
  stats,
  type RelayOptions,
} from "../outbox/index.ts";
import {
  formatEvent,
  formatEventTable,
  formatStats,
  formatAlerts,
  formatPass,
  formatDrain,
} from "./format.ts";

const usage = `usage: npm run outbox -- <command> [options]

commands:
  migrate                         apply pending migrations
  relay once                      run one relay pass
  relay drain [--budget <s>]      run passes until nothing is claimable (default budget 300 s)
  events list [--state pending|fanned|poisoned] [--type <glob>] [--limit <n>]
  events show <id>                an event with its fan-out and alerts
  events requeue <id>...          put poisoned events back in line
  alerts [--open]                 recent alerts
  stats                           backlog, oldest pending age, poisoned count, relay backoff

options:
  --json                          machine-readable output
  --batch-size <n>                rows per relay pass (default ${RELAY_POLICY.batchSize})

environment (or .env): DATABASE_URL; for relay commands also QSTASH_TOKEN, PUBLIC_URL,
and QSTASH_URL (default https://qstash.upstash.io)`;

class UsageError extends Error {}

async function main(argv: string[]): Promise<number> {
  if (existsSync(".env")) process.loadEnvFile(".env");
  let parsed;
  try {
    parsed = parseArgs({
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
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help || positionals.length === 0) {
    if (values.help) {
      console.log(usage);
      return 0;
    }
    throw new UsageError("no command given");
  }
  const [command, sub, ...rest] = positionals;
  const print = (data: unknown, human: () => string) =>
    console.log(values.json ? JSON.stringify(data, null, 2) : human());

  const databaseUrl = requireEnv("DATABASE_URL");
  if (command === "migrate") {
    await migrateDatabase(databaseUrl);
    print({ migrated: true }, () => "migrations applied");
    return 0;
  }

  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2, connectionTimeoutMillis: 10_000 });
  pool.on("error", () => undefined);
  try {
    switch (command) {
      case "relay": {
        const relay: RelayOptions = {
          pool,
          publisher: createQStashPublisher({
            baseUrl: process.env.QSTASH_URL ?? "https://qstash.upstash.io",
            token: requireEnv("QSTASH_TOKEN"),
            publicUrl: requireEnv("PUBLIC_URL"),
          }),
          subscriptions,
          batchSize: intOption(values["batch-size"], "--batch-size", RELAY_POLICY.batchSize),
        };
        if (sub === "once") {
          const pass = await runPass(relay);
          print(pass, () => formatPass(pass));
          return pass.error ? 1 : 0;
        }
        if (sub === "drain") {
          const budgetMs = intOption(values.budget, "--budget", 300) * 1000;
          const progress = process.stderr.isTTY && !values.json;
          const started = Date.now();
          const result = await drain({
            ...relay,
            budgetMs,
            onPass: (_pass, totals) => {
              if (!progress) return;
              const rate = Math.round(totals.fanned / Math.max(0.001, (Date.now() - started) / 1000));
              process.stderr.write(
                `\rpasses ${totals.passes} · fanned ${totals.fanned} · ${rate} events/s   `,
              );
            },
          });
          if (progress) process.stderr.write("\n");
          print(result, () => formatDrain(result));
          return result.stoppedBecause === "backoff" ? 1 : 0;
        }
        throw new UsageError(`unknown relay command "${sub ?? ""}" (once, drain)`);
      }
      case "events": {
        if (sub === "list") {
          const state = values.state;
          if (state !== undefined && !isEventState(state)) {
            throw new UsageError(
              `--state must be ${EVENT_STATES.join(", ").replace(/, (\w+)$/, " or $1")}, got "${state}"`,
            );
          }
          const found = await listEvents(pool, {
            ...(state ? { state } : {}),
            ...(values.type ? { type: values.type } : {}),
            limit: intOption(values.limit, "--limit", 50),
          });
          print(found, () => formatEventTable(found));
          return 0;
        }
        if (sub === "show") {
          const [id] = rest;
          if (!id || rest.length > 1) throw new UsageError("events show takes one event id");
          const event = await getEvent(pool, id);
          if (!event) {
            console.error(`edge-outbox: no event ${id}`);
            return 1;
          }
          print(event, () => formatEvent(event));
          return 0;
        }
        if (sub === "requeue") {
          if (rest.length === 0) throw new UsageError("events requeue takes one or more event ids");
          const result = await requeue(pool, rest);
          print(result, () =>
            [
              `requeued: ${result.requeued.length ? result.requeued.join(", ") : "none"}`,
              ...(result.notPoisoned.length
                ? [`not poisoned (left alone): ${result.notPoisoned.join(", ")}`]
                : []),
              ...(result.unknown.length ? [`unknown: ${result.unknown.join(", ")}`] : []),
            ].join("\n"),
          );
          return result.unknown.length > 0 ? 1 : 0;
        }
        throw new UsageError(`unknown events command "${sub ?? ""}" (list, show, requeue)`);
      }
      case "alerts": {
        if (sub) throw new UsageError(`alerts takes no argument, got "${sub}"`);
        const found = await listAlerts(pool, {
          open: values.open,
          limit: intOption(values.limit, "--limit", 50),
        });
        print(found, () => formatAlerts(found));
        return 0;
      }
      case "stats": {
        if (sub) throw new UsageError(`stats takes no argument, got "${sub}"`);
        const s = await stats(pool);
        print(s, () => formatStats(s));
        return 0;
      }
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } finally {
    await pool.end();
  }
}

function requireEnv(name: string): string {
  const value = process.env[name];
  if (!value) throw new UsageError(`${name} is not set (environment or .env)`);
  return value;
}

function intOption(raw: string | undefined, name: string, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${name} must be a positive integer, got "${raw}"`);
  return n;
}

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ECONNRESET",
  "EAI_AGAIN",
]);

/** One line an operator can act on, instead of a stack trace. */
export function describeFailure(error: unknown): string {
  const e = error as { code?: string; message?: string; errors?: { code?: string }[] };
  const code = e.code ?? e.errors?.[0]?.code;
  if (code && CONNECTION_CODES.has(code)) {
    return `cannot reach the database (${code}): check DATABASE_URL and that Postgres is running`;
  }
  if (code === "28P01" || code === "28000")
    return `the database refused the credentials in DATABASE_URL (${code})`;
  if (code === "3D000") return `the database in DATABASE_URL does not exist (${e.message})`;
  if (code === "42P01")
    return `the outbox tables are missing: run \`npm run outbox -- migrate\` (${e.message})`;
  if (/timeout exceeded when trying to connect/i.test(e.message ?? "")) {
    return "cannot reach the database (timed out): check DATABASE_URL and that Postgres is running";
  }
  return e.message ?? String(error);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof UsageError) {
      console.error(`edge-outbox: ${error.message}\n\n${usage}`);
      process.exit(2);
    }
    if (error instanceof InvalidInputError) {
      console.error(`edge-outbox: ${error.message}`);
      process.exit(2);
    }
    console.error(`edge-outbox: ${describeFailure(error)}`);
    if (process.env.DEBUG) console.error(error);
    process.exit(1);
  },
);
