import { parseArgs, type ParseArgsConfig } from "node:util";

type Options = NonNullable<ParseArgsConfig["options"]>;

/** A wrong command line: said in one line with the usage, exit 2, never a stack trace. */
export class BenchUsageError extends Error {}

/**
 * A benchmark's command line, read before anything starts (a database, a Worker):
 * `--help` (or `-h`) prints `usage` and exits 0; an unknown option, a missing value
 * or a value `check` refuses (by throwing BenchUsageError) prints the reason and
 * the usage to stderr and exits 2. Answers what `check` made of the options.
 */
export function benchCommandLine<T extends Options, R>(
  usage: string,
  options: T,
  check: (values: ReturnType<typeof parseArgs<{ options: T }>>["values"]) => R,
  argv: string[] = process.argv.slice(2),
): R {
  try {
    if (argv.includes("--help") || argv.includes("-h")) {
      console.log(usage);
      process.exit(0);
    }
    return check(parseArgs({ args: argv, options }).values);
  } catch (error) {
    // parseArgs refuses with a TypeError whose code names the problem (ERR_PARSE_ARGS_*).
    const parseError = (error as { code?: unknown }).code?.toString().startsWith("ERR_PARSE_ARGS_");
    if (!(error instanceof BenchUsageError) && !parseError) throw error;
    console.error(`${(error as Error).message}\n\n${usage}`);
    process.exit(2);
  }
}

/** `--name`'s value as a whole number at least `min`, or a BenchUsageError saying what was given. */
export function wholeOption(name: string, raw: string | undefined, min = 1): number {
  const n = /^\d{1,9}$/.test(raw ?? "") ? Number(raw) : NaN;
  if (!(n >= min)) {
    throw new BenchUsageError(
      `--${name} must be ${min === 1 ? "a positive integer" : `a whole number ≥ ${min}`}, got ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

/** `--name`'s value as milliseconds ≥ 0 (fractions allowed), or a BenchUsageError. */
export function msOption(name: string, raw: string | undefined): number {
  const ms = raw === undefined || raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(ms) || ms < 0) {
    throw new BenchUsageError(`--${name} must be a number of ms ≥ 0, got ${JSON.stringify(raw)}`);
  }
  return ms;
}
