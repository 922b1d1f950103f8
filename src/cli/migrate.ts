import { migrateDatabase, migrationOutcome } from "../node/postgres.ts";
import { UsageError } from "./args.ts";
import type { Command } from "./command.ts";

/** `migrate`: on its own connection (session features; no pool needed). */
export const migrateCommand: Command = ({ sub }) => {
  if (sub) throw new UsageError(`migrate takes no argument, got "${sub}"`);
  return async ({ databaseUrl, print }) => {
    // Progress on stderr, so --json's stdout stays one document.
    const { applied, total } = await migrateDatabase(databaseUrl, undefined, {
      log: (line) => process.stderr.write(`migrate: ${line}\n`),
    });
    print({ migrated: true, applied, total }, () => migrationOutcome({ applied, total }));
    return 0;
  };
};
