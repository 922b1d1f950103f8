import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import type { Db } from "../domain/db.ts";
import type { Options } from "./args.ts";

/** What a command is given to read: its options, its sub-command and the words after it. */
export interface CommandLine {
  options: Options;
  sub: string | undefined;
  rest: string[];
}

/** What a command runs with: a database pool (and its URL), and one way to print. */
export interface CommandIo {
  pool: pg.Pool;
  databaseUrl: string;
  /** JSON with --json, the human form otherwise. */
  print: (data: unknown, human: () => string) => void;
}

/**
 * A command checks its whole command line first, throwing UsageError, and only
 * then is given the database: a mistyped command is told so, not that
 * DATABASE_URL is missing or the database unreachable. Once running, it throws a
 * Refusal for what it cannot do rather than print it: main.ts says every failure
 * one way, and as JSON under --json.
 */
export type Command = (line: CommandLine) => (io: CommandIo) => Promise<number>;

/**
 * The command's pool as the domain's Db, for the use cases written against drizzle
 * (the Worker's is drizzle over the Neon WebSocket Pool; the cast bridges the two
 * drivers' query-result types, as src/domain/db.ts describes).
 */
export function dbOf(pool: pg.Pool): Db {
  return drizzle(pool) as unknown as Db;
}
