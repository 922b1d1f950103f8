import { ALERT_KIND_RULE, isAlertKind, raisedAgainNote } from "../domain/alert-kinds.ts";
import {
  alertsPage,
  countPoisoned,
  MAX_LIST_LIMIT,
  openAlertKinds,
  resolveAlert,
  resolveAlerts,
} from "../outbox/index.ts";
import { beforeOption, idArgument, intOption, Refusal, UsageError, type Options } from "./args.ts";
import { dbOf, type Command } from "./command.ts";
import { countOpenFailures, operatorStats, stillNotRetried } from "../domain/job-failures/retry.ts";
import { formatAlerts, formatStats, olderHint } from "./format.ts";

/**
 * `alerts [--open] [--limit <n>] [--before <id>]`, and `alerts resolve <id>|--kind <kind>`:
 * what the dashboard's alerts page shows and does.
 */
export const alertsCommand: Command = ({ options, sub, rest }) => {
  if (sub === "resolve") return resolveCommand(options, rest);
  if (sub) throw new UsageError(`alerts takes no argument but resolve, got "${sub}"`);
  const limit = intOption(options.limit, "--limit", 50, MAX_LIST_LIMIT);
  const before = beforeOption(options.before);
  return async ({ pool, print }) => {
    // A page at a time, as `events list`: --before pages back by id. The hint is the
    // text form's; --json stays the array it was.
    const page = await alertsPage(pool, { open: options.open, before, limit });
    print(page.alerts, () => formatAlerts(page.alerts) + olderHint(page.nextBefore));
    return 0;
  };
};

export const statsCommand: Command = ({ sub }) => {
  if (sub) throw new UsageError(`stats takes no argument, got "${sub}"`);
  return async ({ pool, print }) => {
    const s = await operatorStats(pool, dbOf(pool));
    print(s, () => formatStats(s));
    return 0;
  };
};

/**
 * Resolving records that someone has looked (resolveAlerts); it changes no event.
 * One alert by id, or every open alert of a kind up to the newest open when the
 * command read them, as the dashboard's "Resolve all" does with what its page showed.
 */
function resolveCommand(options: Options, rest: string[]): ReturnType<Command> {
  const kind = options.kind;
  if (kind !== undefined) {
    if (rest.length > 0) throw new UsageError("alerts resolve takes an alert id or --kind <kind>, not both");
    return async ({ pool, print }) => {
      const kinds = await openAlertKinds(pool);
      const open = kinds.find((k) => k.kind === kind);
      // A kind no alert has exits 2, as any mistyped input: a script cannot tell
      // "resolved 0" from a typo. One an older version raised, still open, is taken.
      if (!open && !isAlertKind(kind)) throw new UsageError(`--kind ${ALERT_KIND_RULE}, got "${kind}"`);
      const resolved = open ? await resolveAlerts(pool, { kind, upTo: open.upTo }) : 0;
      // A mistyped kind resolves nothing either: the kinds that are open say which was meant.
      const others = kinds.map((k) => `${k.kind} (${k.count})`).join(", ");
      // Resolving a job.failed alert sends nothing again: say what is still owed.
      const owed = kind === "job.failed" ? await countOpenFailures(dbOf(pool)) : 0;
      // Nor does resolving an event.poisoned alert requeue its events (ADR 0044).
      const poisoned = kind === "event.poisoned" && resolved > 0 ? (await countPoisoned(pool)).count : 0;
      const said =
        resolved === 0
          ? `no open ${kind} alert; open ones: ${others || "none"}`
          : `resolved ${resolved} ${kind} alert${resolved === 1 ? "" : "s"}`;
      const again = resolved > 0 ? raisedAgainNote(kind) : undefined;
      print(
        { kind, resolved },
        () =>
          said +
          (owed > 0 ? notRetriedHint(owed) : "") +
          (poisoned > 0 ? stillPoisonedHint(poisoned) : "") +
          (again ? `; ${again}` : ""),
      );
      return 0;
    };
  }
  const [raw] = rest;
  if (!raw || rest.length > 1) throw new UsageError("alerts resolve takes one alert id, or --kind <kind>");
  const id = Number(idArgument(raw, "an alert", "whole"));
  return async ({ pool, print }) => {
    const outcome = await resolveAlert(pool, id);
    if (!outcome) throw new Refusal("not_found", `no alert ${id}`);
    const shown = { id, kind: outcome.kind, resolved: outcome.wasOpen, resolvedAt: outcome.resolvedAt };
    const again = raisedAgainNote(outcome.kind);
    print(shown, () =>
      outcome.wasOpen
        ? `resolved alert ${id} (${outcome.kind})${again ? `; ${again}` : ""}`
        : `alert ${id} was already resolved at ${outcome.resolvedAt.toISOString()}`,
    );
    return 0;
  };
}

/** After event.poisoned alerts are resolved: their events stay poisoned until requeued. */
function stillPoisonedHint(poisoned: number): string {
  const events = poisoned === 1 ? "1 event is" : `${poisoned} events are`;
  return `; ${events} still poisoned: \`events requeue --all\` sends them again`;
}

/**
 * After job.failed alerts are resolved: the failures they named are still not sent,
 * and retention deletes a failure whose alert is resolved once it is past
 * RETENTION_DAYS (ADR 0032), so a resolve that meant "seen" can become "dropped".
 */
function notRetriedHint(owed: number): string {
  return (
    `; ${stillNotRetried(owed)}: \`job-failures retry --all\` sends ` +
    "them again (past RETENTION_DAYS the sweep deletes a failure whose alert was resolved)"
  );
}
