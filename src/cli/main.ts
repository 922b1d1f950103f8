// Operator CLI: `npm run outbox -- <command>`. See `usage` in args.ts.
import { existsSync } from "node:fs";
import pg from "pg";
import { InvalidInputError } from "../outbox/index.ts";
import { ConfigError, parseCommandLine, usage, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { databaseVariables, readVariables } from "./config.ts";
import { eventsCommand } from "./events.ts";
import { jobFailuresCommand } from "./job-failures.ts";
import { migrateCommand } from "./migrate.ts";
import { describeFailure } from "./failure.ts";
import { relayCommand } from "./relay.ts";
import { alertsCommand, statsCommand } from "./status.ts";

const commands: Record<string, Command> = {
  migrate: migrateCommand,
  relay: relayCommand,
  events: eventsCommand,
  "job-failures": jobFailuresCommand,
  alerts: alertsCommand,
  stats: statsCommand,
};

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
  const print = (data: unknown, human: () => string) =>
    console.log(options.json ? JSON.stringify(data, null, 2) : human());

  const { DATABASE_URL } = readVariables(databaseVariables);
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2, connectionTimeoutMillis: 10_000 });
  pool.on("error", () => undefined);
  try {
    return await run({ pool, databaseUrl: DATABASE_URL, print });
  } finally {
    await pool.end();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof UsageError) {
      console.error(`edge-outbox: ${error.message}\n\n${usage}`);
      process.exit(2);
    }
    if (error instanceof InvalidInputError || error instanceof ConfigError) {
      console.error(`edge-outbox: ${error.message}`);
      process.exit(2);
    }
    console.error(`edge-outbox: ${describeFailure(error)}`);
    if (process.env.DEBUG) console.error(error);
    process.exit(1);
  },
);
