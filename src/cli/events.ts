import { SCOPE_MAX, singleLine } from "../domain/text.ts";
import { eventJobFailures } from "../domain/job-failures/record.ts";
import { openAlertsCountingEvent } from "../domain/job-failures/retry.ts";
import { eventDeliveries } from "../domain/webhooks/delivery-log.ts";
import {
  EVENT_GONE_HINT,
  assertEventId,
  EVENT_STATES,
  getEvent,
  isEventState,
  isTypeGlob,
  browseEvents,
  MAX_LIST_LIMIT,
  countPoisoned,
  requeue,
  requeuePoisonedInRounds,
  TYPE_GLOB_RULE,
} from "../outbox/index.ts";
import { beforeOption, intOption, Refusal, UsageError } from "./args.ts";
import { dbOf, type Command } from "./command.ts";
import { formatEvent, formatEventTable, olderHint } from "./format.ts";
import { eventWaitingNotes } from "../domain/webhooks/fanout.ts";

/** The longest each filter may be, by the rules GET /admin/events takes them with (trimmed, one line). */
const FILTER_MAX = { subject: 200, scope: SCOPE_MAX } as const;

/** `events list|show|requeue`: what an operator looks at, and the one fix they apply. */
export const eventsCommand: Command = ({ options, sub, rest }) => {
  if (sub === "list") {
    const state = options.state;
    if (state !== undefined && !isEventState(state)) {
      throw new UsageError(
        `--state must be ${EVENT_STATES.join(", ").replace(/, (\w+)$/, " or $1")}, got "${state}"`,
      );
    }
    if (options.type !== undefined && !isTypeGlob(options.type)) {
      throw new UsageError(`--type ${TYPE_GLOB_RULE}, got "${options.type}"`);
    }
    if (rest.length > 0) throw new UsageError(`events list takes no argument, got "${rest[0]}"`);
    const [subject, scope] = (["subject", "scope"] as const).map((name) => {
      const value = options[name];
      if (value === undefined) return undefined;
      const parsed = singleLine(FILTER_MAX[name]).safeParse(value);
      if (!parsed.success)
        throw new UsageError(
          `--${name} must be one line of 1 to ${FILTER_MAX[name]} characters, got "${value}"`,
        );
      return parsed.data;
    });
    // The events without a scope are asked for by name, as `api-keys create` does.
    if (options.unscoped && scope !== undefined)
      throw new UsageError("events list takes --scope <scope> or --unscoped, not both");
    const limit = intOption(options.limit, "--limit", 50, MAX_LIST_LIMIT);
    const before = beforeOption(options.before);
    return async ({ pool, print }) => {
      // The dashboard's events page, a page at a time: --before pages back by seq.
      const page = await browseEvents(pool, {
        ...(state ? { state } : {}),
        ...(options.type ? { type: options.type } : {}),
        ...(subject ? { subject } : {}),
        ...(scope ? { scope } : options.unscoped ? { scope: null } : {}),
        ...(before === undefined ? {} : { beforeSeq: before }),
        limit,
      });
      print(page.events, () => formatEventTable(page.events) + olderHint(page.nextBeforeSeq));
      return 0;
    };
  }
  if (sub === "show") {
    const [id] = rest;
    if (!id || rest.length > 1) throw new UsageError("events show takes one event id");
    assertEventId(id);
    return async ({ pool, print }) => {
      const event = await getEvent(pool, id);
      if (!event) throw new Refusal("not_found", `no event ${id}: ${EVENT_GONE_HINT}`);
      // What the event's webhooks did, as the dashboard's event page shows it; each
      // delivery's attempts are `webhooks delivery <id>`'s to show, so none is read here.
      const webhookDeliveries = await eventDeliveries(dbOf(pool), id);
      const jobFailures = await eventJobFailures(dbOf(pool), id);
      const countingAlerts = await openAlertsCountingEvent(dbOf(pool), id);
      const { jobsWaiting, webhooksNote } = await eventWaitingNotes(dbOf(pool), event, {
        jobFailures,
        webhookDeliveries: webhookDeliveries.length,
      });
      const shown = { ...event, webhookDeliveries, webhooksNote, jobsWaiting, jobFailures, countingAlerts };
      print(shown, () => formatEvent(shown));
      return 0;
    };
  }
  if (sub === "requeue" && options.all) {
    if (rest.length > 0) throw new UsageError("events requeue --all takes no id");
    if (options.type !== undefined && !isTypeGlob(options.type)) {
      throw new UsageError(`--type ${TYPE_GLOB_RULE}, got "${options.type}"`);
    }
    return requeueAll(options.type);
  }
  if (options.type !== undefined) throw new UsageError("events requeue --type goes with --all, not with ids");
  if (sub === "requeue") {
    if (rest.length === 0) throw new UsageError("events requeue takes one or more event ids, or --all");
    rest.forEach(assertEventId);
    return async ({ pool, print }) => {
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
    };
  }
  throw new UsageError(
    sub === undefined
      ? "events needs a command: list, show or requeue"
      : `unknown events command "${sub}" (list, show, requeue)`,
  );
};

/**
 * `events requeue --all [--type <glob>]`: every event poisoned up to the moment the
 * command started (the database's clock), a thousand a statement, oldest first,
 * with a line per round. One poisoned again meanwhile, because its cause is not
 * fixed, is left poisoned for the operator to see, so the run always ends.
 */
function requeueAll(type: string | undefined): ReturnType<Command> {
  return async ({ pool, print }) => {
    const { upTo, count: total } = await countPoisoned(pool, { type });
    const { requeued } = await requeuePoisonedInRounds(
      pool,
      { upTo, type },
      {
        onRound: (soFar) => console.error(`requeued ${soFar} of ${total}…`),
      },
    );
    const what = type === undefined ? "poisoned event" : `poisoned ${type} event`;
    print({ requeued, upTo, type }, () =>
      requeued === 0
        ? `no ${what} to requeue`
        : `requeued ${requeued} ${what}${requeued === 1 ? "" : "s"} (poisoned up to ${upTo}); the relay fans them out on its next pass`,
    );
    return 0;
  };
}
