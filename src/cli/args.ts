import { parseArgs } from "node:util";
import { blankIsAbsent, wholeNumber } from "../domain/text.ts";
import {
  EVENT_STATES,
  IDENTITY_ID_DIGITS,
  InvalidInputError,
  publishAdvice,
  PublishError,
  RELAY_POLICY,
  UUID_PATTERN,
} from "../outbox/index.ts";
import { DEFAULT_QSTASH_URL } from "../worker/env.ts";

export const usage = `usage: npm run outbox -- <command> [options]

commands:
  migrate                         apply pending migrations
  relay once [--now]              run one relay pass
  relay drain [--budget <s>] [--now]
                                  run passes until nothing is claimable (default budget 300 s);
                                  --now ends the relay's backoff first, once QStash has answered
  events list [--state ${EVENT_STATES.join("|")}] [--type <glob>] [--subject <s>]
              [--scope <s> | --unscoped] [--limit <n>] [--before <seq>]
                                  newest first, a page at a time (--before pages back;
                                  --unscoped: the events without a scope)
  events show <id>                an event: fan-out, last error, payload, webhook deliveries, alerts
  events requeue <id>...          put poisoned events back in line
  events requeue --all [--type <glob>]
                                  every event poisoned so far (of that type), with progress
  job-failures list [--subscription <name>] [--limit <n>] [--before <id>]
                                  jobs that exhausted their QStash retries, newest first, a page
                                  at a time (default 50; --before pages back)
  job-failures retry <id>         publish a failed job again as a new job, once
  job-failures retry --all [--subscription <name>]
                                  the same for every failure not yet retried (after an outage),
                                  or only that subscription's
  webhooks list                   endpoints: health, the last day's success rate, pending, failed
  webhooks show <endpoint-id> [--status pending|delivered|failed] [--limit <n>]
                                  an endpoint, its health and its newest deliveries
  webhooks delivery <id>          a delivery, its body and every attempt
  webhooks redeliver <id>         send a delivery again: same body and webhook-id, a new job
  webhooks recover <endpoint-id> --since <time>
                                  send again now the endpoint's deliveries created since then
                                  that gave up or wait for a retry
  webhooks test <endpoint-id>     send a webhook.test event to that endpoint only
  webhooks enable|disable <endpoint-id>
                                  turn an endpoint on (its failed deliveries stay failed) or off
  alerts [--open] [--limit <n>] [--before <id>]
                                  recent alerts, newest first, a page at a time (default 50;
                                  --before pages back)
  alerts resolve <id>|--kind <kind>
                                  mark one alert, or every open one of a kind, as seen
  stats                           backlog, oldest pending age, poisoned count, relay backoff,
                                  open alerts, job failures not retried, jobs waiting in QStash
  api-keys list                   tenant API keys (never the keys themselves)
  api-keys create --name <n> (--scope <s> | --unscoped)
                                  a key for that scope, shown once
  api-keys revoke <id>            refuse that key from now on

options:
  --json                          machine-readable output
  --batch-size <n>                rows per relay pass (default ${RELAY_POLICY.batchSize})

environment (or .env): DATABASE_URL; for relay commands, job-failures retry and
webhooks redeliver|recover|test also QSTASH_TOKEN, PUBLIC_URL, QSTASH_URL (default
https://qstash.upstash.io) and optionally QSTASH_BATCH_MESSAGES and QSTASH_LABEL (for relay
also RELAY_BACKOFF_CAP_SECONDS, for webhooks WEBHOOK_RETRY_SCHEDULE), checked as the Worker
checks its bindings`;

/** Wrong arguments or environment: the CLI prints the usage and exits 2. */
export class UsageError extends Error {}

/** A variable missing or wrong: said in one line, without the usage text, which cannot help. */
export class ConfigError extends Error {}

/**
 * A command that ran and cannot do what was asked (no such event, a job failure
 * already retried, QStash not taking a publish): said in one line, exit 1.
 */
export class Refusal extends Error {
  constructor(
    readonly code:
      "not_found" | "already_retried" | "not_retryable" | "publish_failed" | "qstash_unreachable",
    message: string,
  ) {
    super(message);
  }
}

/**
 * A `.catch` handler for a publish QStash did not take: a publish_failed refusal
 * saying what that left as it was and what to do (`say`, given the advice); any
 * other error goes on as it was.
 */
export function refusedUnpublished(
  say: (error: PublishError, advice: string) => string,
  env: NodeJS.ProcessEnv = process.env,
) {
  return (error: unknown): never => {
    if (!(error instanceof PublishError)) throw error;
    throw new Refusal("publish_failed", say(error, publishAdviceHere(error, env)));
  };
}

/**
 * The Worker's advice (publishAdvice), but for a terminal without QSTASH_URL, whose
 * publish went to Upstash's QStash by default: one meant for `npm run dev`'s was told
 * to try again, which offline could only fail the same way.
 */
function publishAdviceHere(error: PublishError, env: NodeJS.ProcessEnv): string {
  const advice = publishAdvice(error);
  if (blankIsAbsent(env.QSTASH_URL) !== undefined) return advice;
  return (
    `QSTASH_URL is not set, so this went to ${DEFAULT_QSTASH_URL}: if the Worker's QStash is another ` +
    `(npm run dev prints its own), set QSTASH_URL to it; if not, ${advice}`
  );
}

/**
 * Whether --json was asked for, from the words alone: a command line parseArgs
 * refuses (an unknown option, `--type --json`) is still answered in the form the
 * caller reads. A `--json` after `--` is a positional, as parseArgs reads it.
 */
export function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf("--");
  return (end === -1 ? argv : argv.slice(0, end)).includes("--json");
}

const OPTIONS = {
  json: { type: "boolean", default: false },
  state: { type: "string" },
  status: { type: "string" },
  kind: { type: "string" },
  name: { type: "string" },
  subscription: { type: "string" },
  unscoped: { type: "boolean", default: false },
  subject: { type: "string" },
  scope: { type: "string" },
  before: { type: "string" },
  since: { type: "string" },
  type: { type: "string" },
  limit: { type: "string" },
  budget: { type: "string" },
  "batch-size": { type: "string" },
  now: { type: "boolean", default: false },
  open: { type: "boolean", default: false },
  all: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

export function parseCommandLine(argv: string[]) {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, tokens: true, options: OPTIONS });
  } catch (error) {
    throw new UsageError(parseErrorMessage(error as Error & { code?: string }));
  }
  // parseArgs keeps the last of a repeated option: `--type a.* --type b.*` listed
  // b.* alone and said nothing, where a user may have meant both.
  const given = new Map<string, string[]>();
  for (const token of parsed.tokens) {
    if (token.kind !== "option" || token.value === undefined) continue;
    given.set(token.name, [...(given.get(token.name) ?? []), token.value]);
  }
  for (const [name, values] of given) {
    if (values.length > 1)
      throw new UsageError(
        `--${name} was given ${values.length} times (${values.map((v) => `"${v}"`).join(", ")}); give it once`,
      );
  }
  const { values, positionals } = parsed;
  return { values, positionals };
}

/**
 * The usage lines for the command a wrong command line was about (`events list
 * --limit x`: the events list entry), or the whole usage when the command is not
 * one the CLI has. Read leniently, since the line may be what parseArgs refused.
 */
export function usageFor(argv: string[]): string {
  const end = argv.indexOf("--");
  const words = parseArgs({
    args: end === -1 ? argv : argv.slice(0, end),
    allowPositionals: true,
    strict: false,
    options: OPTIONS,
  }).positionals;
  const [command, sub] = words;
  const entries = usageEntries().filter((e) => e.command === command);
  if (entries.length === 0) return usage;
  const ofSub = entries.filter((e) => (sub === undefined ? e.subs.length === 0 : e.subs.includes(sub)));
  const shown = ofSub.length > 0 ? ofSub : entries;
  return (
    `usage: npm run outbox -- <command> [options]\n\n` +
    shown.map((e) => e.text).join("\n") +
    "\n\noptions:\n" +
    usage
      .split("\n")
      // --batch-size is the relay's alone.
      .filter(
        (line) => line.startsWith("  --json") || (command === "relay" && line.startsWith("  --batch-size")),
      )
      .join("\n") +
    `\n\nevery command and the environment it reads: npm run outbox -- --help`
  );
}

/** The `commands:` block of the usage, one entry per command line with its continuation lines. */
function usageEntries(): { command: string; subs: string[]; text: string }[] {
  const block = usage.slice(
    usage.indexOf("commands:\n") + "commands:\n".length,
    usage.indexOf("\n\noptions:"),
  );
  const entries: { command: string; subs: string[]; text: string }[] = [];
  for (const line of block.split("\n")) {
    // An entry starts two spaces in; its continuation lines are indented further.
    if (/^ {2}\S/.test(line)) {
      const [command = "", second = ""] = line.trim().split(/\s+/);
      entries.push({ command, subs: /^[a-z][a-z|-]*$/.test(second) ? second.split("|") : [], text: line });
    } else if (entries.length > 0) {
      entries[entries.length - 1]!.text += `\n${line}`;
    }
  }
  return entries;
}

/**
 * parseArgs's refusal in the CLI's words. Its own told a mistyped `--jsn` to "place it
 * at the end of the command after '--'" (with a quote left open), and `--limit -1` that
 * its argument was "ambiguous" over three lines.
 */
function parseErrorMessage(error: Error & { code?: string }): string {
  const option = /'(-{1,2}[^' ]+)/.exec(error.message)?.[1];
  if (!option) return error.message;
  if (error.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") return `${option} is not an option`;
  if (error.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    if (/does not take an argument/.test(error.message)) return `${option} takes no value`;
    if (/ambiguous/.test(error.message))
      return `${option} needs a value; one that starts with a dash goes as ${option}=<value>`;
    return `${option} needs a value`;
  }
  return error.message;
}

export type Options = ReturnType<typeof parseCommandLine>["values"];

/**
 * The options each command reads, beyond --json and --help (by "command sub", or
 * by the command alone). parseArgs knows every option of every command, so without
 * this `events list --status failed` would list everything and say nothing.
 */
const OPTIONS_OF: Record<string, readonly string[]> = {
  migrate: [],
  "relay once": ["batch-size", "now"],
  "relay drain": ["budget", "batch-size", "now"],
  "events list": ["state", "type", "subject", "scope", "unscoped", "limit", "before"],
  "events show": [],
  "events requeue": ["all", "type"],
  "job-failures list": ["subscription", "limit", "before"],
  "job-failures retry": ["all", "subscription"],
  "webhooks list": [],
  "webhooks show": ["status", "limit"],
  "webhooks delivery": [],
  "webhooks redeliver": [],
  "webhooks recover": ["since"],
  "webhooks test": [],
  "webhooks enable": [],
  "webhooks disable": [],
  alerts: ["open", "limit", "before"],
  "alerts resolve": ["kind"],
  stats: [],
  "api-keys list": [],
  "api-keys create": ["name", "scope", "unscoped"],
  "api-keys revoke": [],
};

/** A usage error for an option the command does not read (after the command itself was checked). */
export function checkOptionsOf(command: string, sub: string | undefined, options: Options): void {
  const key = Object.hasOwn(OPTIONS_OF, `${command} ${sub}`) ? `${command} ${sub}` : command;
  const allowed = OPTIONS_OF[key] ?? [];
  for (const [name, value] of Object.entries(options)) {
    if (name === "json" || name === "help" || value === undefined || value === false) continue;
    if (!allowed.includes(name)) throw new UsageError(`--${name} is not an option of ${key}`);
  }
}

const ID_SHAPES = {
  uuid: { pattern: new RegExp(`^${UUID_PATTERN}$`), says: "a UUID" },
  whole: { pattern: new RegExp(`^${IDENTITY_ID_DIGITS}$`), says: "a positive whole number" },
} as const;

/**
 * An id from the command line in the shape its table gives it, checked before the
 * database sees it: `"abc" is not an alert id (a positive whole number)`, invalid_input.
 * `noun` carries its article ("a job failure", "an alert").
 */
export function idArgument(raw: string, noun: string, shape: keyof typeof ID_SHAPES): string {
  const { pattern, says } = ID_SHAPES[shape];
  if (!pattern.test(raw)) throw new InvalidInputError(`"${raw}" is not ${noun} id (${says})`);
  return raw;
}

/**
 * A whole-number option, read as a query parameter is (`wholeNumber`: digits only,
 * so `1e3`, `0x10` and ` 5` are not numbers here), but refused in one sentence
 * naming the whole range and what was given, which is what a terminal user needs.
 */
export function intOption(raw: string | undefined, name: string, fallback: number, max = Infinity): number {
  if (raw === undefined) return fallback;
  const parsed = wholeNumber(1, max).safeParse(raw);
  if (!parsed.success) {
    const range = max === Infinity ? "a positive integer" : `an integer from 1 to ${max}`;
    throw new UsageError(`${name} must be ${range}, got "${raw}"`);
  }
  return parsed.data;
}

/** A listing's `--before <seq|id>` (the cursor its older-page hint names), or undefined when not given. */
export function beforeOption(raw: string | undefined): number | undefined {
  return raw === undefined ? undefined : intOption(raw, "--before", 0);
}
