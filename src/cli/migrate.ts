import { migrateDatabase } from "../node/postgres.ts";
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
    // "migrations applied" was said too by a run that waited for another and applied none.
    print({ migrated: true, applied, total }, () =>
      applied === 0
        ? `nothing to apply: all ${total} migrations were applied already`
        : `applied ${applied} migration${applied === 1 ? "" : "s"} (${total} in all)`,
    );
    return 0;
  };
};
