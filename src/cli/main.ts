// Operator CLI: `npm run outbox -- <command>`. See `usage` in args.ts.
import { existsSync } from "node:fs";
import pg from "pg";
import { DomainError } from "../domain/errors.ts";
import { InvalidInputError } from "../outbox/index.ts";
import {
  checkOptionsOf,
  ConfigError,
  parseCommandLine,
  Refusal,
  usage,
  usageFor,
  UsageError,
  wantsJson,
} from "./args.ts";
import type { Command } from "./command.ts";
import { databaseVariables, readVariables } from "./config.ts";
import { apiKeysCommand } from "./api-keys.ts";
import { eventsCommand } from "./events.ts";
import { jobFailuresCommand } from "./job-failures.ts";
import { migrateCommand } from "./migrate.ts";
import { describeFailure } from "./failure.ts";
import { relayCommand } from "./relay.ts";
import { alertsCommand, statsCommand } from "./status.ts";
import { webhooksCommand } from "./webhooks.ts";

const commands: Record<string, Command> = {
  migrate: migrateCommand,
  relay: relayCommand,
  events: eventsCommand,
  "job-failures": jobFailuresCommand,
  webhooks: webhooksCommand,
  alerts: alertsCommand,
  stats: statsCommand,
  "api-keys": apiKeysCommand,
};

const asJson = (data: unknown) => JSON.stringify(data, null, 2);

async function main(argv: string[]): Promise<number> {
  if (existsSync(".env")) process.loadEnvFile(".env");
  const { values: options, positionals } = parseCommandLine(argv);
  if (options.help) {
    console.log(usage);
    return 0;
  }
  const [command, sub, ...rest] = positionals;
  if (command === undefined) throw new UsageError("no command given");
  const parse = Object.hasOwn(commands, command) ? commands[command] : undefined;
  if (!parse) throw new UsageError(`unknown command "${command}"`);
  // The whole command line is checked before the environment and the database.
  const run = parse({ options, sub, rest });
  checkOptionsOf(command, sub, options);
  const print = (data: unknown, human: () => string) => console.log(options.json ? asJson(data) : human());

  const { DATABASE_URL } = readVariables(databaseVariables);
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2, connectionTimeoutMillis: 10_000 });
  pool.on("error", () => undefined);
  try {
    return await run({ pool, databaseUrl: DATABASE_URL, print });
  } finally {
    await pool.end();
  }
}

/** How an error ends the CLI: its exit code, and the code a script reads under --json. */
function outcomeOf(error: unknown): { exit: number; code: string; message: string } {
  if (error instanceof UsageError) return { exit: 2, code: "usage", message: error.message };
  if (error instanceof ConfigError) return { exit: 2, code: "config", message: error.message };
  if (error instanceof InvalidInputError) return { exit: 2, code: "invalid_input", message: error.message };
  if (error instanceof Refusal) return { exit: 1, code: error.code, message: error.message };
  // A use case's own answer (no such endpoint, a disabled one): its code, as the routes map it to a status.
  if (error instanceof DomainError) return { exit: 1, code: error.code, message: error.message };
  return { exit: 1, code: "failed", message: describeFailure(error) };
}

/**
 * Exits once stdout and stderr have taken everything written to them. Into a pipe
 * Node writes 64 KiB at a time and keeps the rest for later, and `process.exit`
 * drops what it kept: `events list --json | jq` read a document cut off mid-string
 * while the exit code said 0. A write's callback runs after the writes before it.
 */
function exitWhenWritten(code: number): void {
  let open = 2;
  const written = () => {
    if (--open === 0) process.exit(code);
  };
  process.stdout.write("", written);
  process.stderr.write("", written);
}

const argv = process.argv.slice(2);
main(argv).then(
  (code) => exitWhenWritten(code),
  (error: unknown) => {
    const { exit, code, message } = outcomeOf(error);
    if (wantsJson(argv)) {
      // On stdout, where --json answers go: a script reads one JSON document there
      // whatever happened, and tells an answer from a refusal by `error` (and the
      // exit code). stderr stays for progress lines and DEBUG's stack.
      console.log(asJson({ error: { code, message } }));
    } else {
      // The usage helps with a wrong command line, not with anything else.
      console.error(`edge-outbox: ${message}${error instanceof UsageError ? `\n\n${usageFor(argv)}` : ""}`);
    }
    if (code === "failed" && process.env.DEBUG) console.error(error);
    exitWhenWritten(exit);
  },
);
