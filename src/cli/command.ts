import type pg from "pg";
import type { Options } from "./args.ts";

/** What each command gets: its arguments, a database pool, and one way to print. */
export interface Command {
  pool: pg.Pool;
  options: Options;
  sub: string | undefined;
  rest: string[];
  /** JSON with --json, the human form otherwise. */
  print: (data: unknown, human: () => string) => void;
}
