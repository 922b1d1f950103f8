import { failedJobFromCallback, recordFailedJob } from "../../domain/job-failures/failed-job.ts";
import { FAILURE_CALLBACK_PATH, failureCallbackUrl } from "../../outbox/index.ts";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";
import { verifiedBody } from "../signature.ts";

/**
 * `POST /jobs/_failed`: signed by QStash like any delivery (for this URL), and
 * delivered at least once, so recording is idempotent on the message id. Each
 * failure becomes a `job_failures` row, counted by its subscription's one open
 * `job.failed` alert (a `webhook.deliver` job fails its delivery instead). A signed body we cannot
 * read answers 489: retrying it cannot help. A callback that never arrives (this
 * Worker was down for all its retries) is found by the cron sweep in QStash's
 * dead-letter queue and recorded the same way.
 */
export function registerJobsFailed(app: App) {
  app.post(FAILURE_CALLBACK_PATH, async (c) => {
    const raw = await verifiedBody(c, failureCallbackUrl(c.var.config.PUBLIC_URL));
    const failed = failedJobFromCallback(raw);
    if (!failed) throw new ApiError("job_rejected", "failure callback body is not QStash's callback shape");
    const { recorded } = await recordFailedJob(c.var.db, failed);
    return c.json({ ok: true, recorded });
  });
}
