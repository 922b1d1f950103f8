import { z } from "zod";
import { CANARY_JOB, canaryArrived, FOREIGN_REFUSAL } from "../../domain/canary.ts";
import { safeJson } from "../../domain/text.ts";
import { JOBS_PATH, jobUrl } from "../../outbox/index.ts";
import { qstashLabelFor } from "../env.ts";
import { ApiError } from "../errors.ts";
import type { App } from "../new-app.ts";
import { verifiedBody } from "../signature.ts";

const canaryJob = z.strictObject({ canaryId: z.guid(), label: z.string().min(1).max(200) });

/**
 * `POST /jobs/_canary`: the cron sweep's canary (ADR 0045), signed by QStash like
 * every job, for this exact URL. Its arrival is what tells the sweep that jobs reach
 * this Worker. A canary this database did not send is another deployment's: it is
 * raised as `jobs.foreign` and refused with 489, so that deployment's QStash logs
 * say so too and it is not retried.
 */
export function registerJobsCanary(app: App) {
  app.post(`${JOBS_PATH}/${CANARY_JOB}`, async (c) => {
    const config = c.var.config;
    const raw = await verifiedBody(c, jobUrl(config.PUBLIC_URL, CANARY_JOB));
    const parsed = canaryJob.safeParse(safeJson(raw));
    if (!parsed.success) throw new ApiError("job_rejected", "job body is not a canary");
    const arrival = await canaryArrived(c.var.db, parsed.data, qstashLabelFor(config));
    if (!arrival.ours) throw new ApiError("job_rejected", `${FOREIGN_REFUSAL}: ${arrival.message}`);
    return c.json({ ok: true, canary: "arrived" });
  });
}
