import { drizzle } from "drizzle-orm/node-postgres";
import type { Db } from "../domain/db.ts";
import { listJobFailures } from "../domain/job-failures/record.ts";
import { retryJobFailure } from "../domain/job-failures/retry.ts";
import { MAX_LIST_LIMIT, PublishError } from "../outbox/index.ts";
import { publisherFor } from "../worker/relay.ts";
import { intOption, UsageError } from "./args.ts";
import type { Command } from "./command.ts";
import { publishVariables, readVariables } from "./config.ts";
import { formatJobFailures } from "./format.ts";

/** A job failure's id: its bigint identity, digits only, exact as a JS number. */
const FAILURE_ID = /^[1-9][0-9]{0,14}$/;

/**
 * `job-failures list|retry`: jobs that exhausted their QStash retries, and the one
 * fix an operator applies, the same use case as `POST /admin/job-failures/:id/retry`.
 */
export const jobFailuresCommand: Command = ({ options, sub, rest }) => {
  if (sub === "list") {
    if (rest.length > 0) throw new UsageError(`job-failures list takes no argument, got "${rest[0]}"`);
    const limit = intOption(options.limit, "--limit", 50, MAX_LIST_LIMIT);
    return async ({ pool, print }) => {
      const found = await listJobFailures(drizzle(pool) as unknown as Db, { limit });
      print(found, () => formatJobFailures(found));
      return 0;
    };
  }
  if (sub === "retry") {
    const [id] = rest;
    if (!id || rest.length > 1) throw new UsageError("job-failures retry takes one job failure id");
    if (!FAILURE_ID.test(id)) throw new UsageError(`"${id}" is not a job failure id (a whole number)`);
    return async ({ pool, print }) => {
      const env = readVariables(publishVariables);
      let result;
      try {
        result = await retryJobFailure(drizzle(pool) as unknown as Db, publisherFor(env), Number(id));
      } catch (error) {
        if (!(error instanceof PublishError)) throw error;
        console.error(
          `edge-outbox: QStash did not take the retry of job failure ${id} (${error.message}); ` +
            "the failure is left un-retried: try again",
        );
        return 1;
      }
      if (!result.retried) {
        console.error(`edge-outbox: ${result.message}`);
        return 1;
      }
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
