import { jobFailuresPage } from "../domain/job-failures/record.ts";
import { isSubscriptionName, SUBSCRIPTION_RULE } from "../domain/subscriptions.ts";
import { notRetriedMessage, retryAllJobFailures, retryJobFailure } from "../domain/job-failures/retry.ts";
import { MAX_LIST_LIMIT } from "../outbox/index.ts";
import { publisherFor } from "../worker/relay.ts";
import { beforeOption, idArgument, intOption, Refusal, refusedUnpublished, UsageError } from "./args.ts";
import { dbOf, type Command } from "./command.ts";
import { publishVariables, readVariables } from "./config.ts";
import { formatJobFailures, olderHint } from "./format.ts";

/**
 * `job-failures list|retry`: jobs that exhausted their QStash retries, and the one
 * fix an operator applies, the same use case as `POST /admin/job-failures/:id/retry`.
 */
export const jobFailuresCommand: Command = ({ options, sub, rest }) => {
  if (sub === "list") {
    if (rest.length > 0) throw new UsageError(`job-failures list takes no argument, got "${rest[0]}"`);
    const limit = intOption(options.limit, "--limit", 50, MAX_LIST_LIMIT);
    const before = beforeOption(options.before);
    const subscription = subscriptionOption(options.subscription);
    return async ({ pool, print }) => {
      // A page at a time, as the dashboard's job failures page: --before pages back by id.
      const page = await jobFailuresPage(dbOf(pool), { before, limit, subscription });
      print(page.jobFailures, () => formatJobFailures(page.jobFailures) + olderHint(page.nextBefore));
      return 0;
    };
  }
  if (sub === "retry" && options.all) {
    if (rest.length > 0) throw new UsageError("job-failures retry --all takes no id");
    return retryAll(subscriptionOption(options.subscription));
  }
  if (sub === "retry" && options.subscription !== undefined)
    throw new UsageError(
      "--subscription is for job-failures retry --all (one failure is of one subscription)",
    );
  if (sub === "retry") {
    const [id] = rest;
    if (!id || rest.length > 1) throw new UsageError("job-failures retry takes one job failure id");
    idArgument(id, "a job failure", "whole");
    return async ({ pool, print }) => {
      const env = readVariables(publishVariables);
      const result = await retryJobFailure(dbOf(pool), publisherFor(env), Number(id)).catch(
        refusedUnpublished((error, advice) => notRetriedMessage(id, error, advice)),
      );
      if (!result.retried) throw new Refusal(result.refused, result.message);
      const { retriedAt, retryMessageId } = result;
      print(
        { id: result.id, retriedAt, retryMessageId },
        () => `job failure ${id} retried as ${retryMessageId}`,
      );
      return 0;
    };
  }
  throw new UsageError(
    sub === undefined
      ? "job-failures needs a command: list or retry"
      : `unknown job-failures command "${sub}" (list, retry)`,
  );
};

/** `--subscription <name>`: one of the subscriptions, or a usage error that names them. */
function subscriptionOption(value: string | undefined): string | undefined {
  if (value === undefined || isSubscriptionName(value)) return value;
  throw new UsageError(`--subscription ${SUBSCRIPTION_RULE}, got "${value}"`);
}

/**
 * `job-failures retry --all [--subscription <name>]`: every failure not yet retried
 * (of that subscription), up to the newest at the start (one recorded meanwhile is
 * left for the operator to see), a thousand a publish, with a line per round so a
 * long run shows its progress.
 */
const retryAll =
  (subscription: string | undefined): ReturnType<Command> =>
  async ({ pool, print }) => {
    const env = readVariables(publishVariables);
    const db = dbOf(pool);
    const { rows } = await pool.query<{ newest: string | null }>(
      "SELECT max(id) AS newest FROM job_failures",
    );
    const upTo = Number(rows[0]?.newest ?? 0);
    const retried: { id: number; retryMessageId: string }[] = [];
    const publisher = publisherFor(env);
    for (;;) {
      const round = await retryAllJobFailures(db, publisher, { upTo, subscription }).catch(
        refusedUnpublished(
          (error, advice) =>
            `QStash did not take the retried jobs (${error.message}); ` +
            `${retried.length} retried before this, none of this round's is marked retried: ${advice}`,
        ),
      );
      retried.push(...round.retried);
      if (round.retried.length > 0) console.error(`retried ${retried.length} so far…`);
      // Nothing claimed although more are open: another retry has them.
      if (!round.more || round.retried.length === 0) break;
    }
    print({ retried }, () =>
      retried.length === 0
        ? `no job failure${subscription === undefined ? "" : ` of ${subscription}`} left to retry`
        : `retried ${retried.length} job failure${retried.length === 1 ? "" : "s"} (ids ${retried[0]!.id}–${retried.at(-1)!.id})`,
    );
    return 0;
  };
