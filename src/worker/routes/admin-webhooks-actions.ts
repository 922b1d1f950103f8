import { z } from "zod";
import { recoverFailed } from "../../domain/webhooks/recover.ts";
import { redeliver } from "../../domain/webhooks/redeliver.ts";
import { sendTestEvent } from "../../domain/webhooks/send-test.ts";
import type { App } from "../new-app.ts";
import { noBody, valid } from "../validate.ts";
import { deliverQueueFor } from "../webhooks.ts";
import { ID } from "./params.ts";

// A missing `since` is said to be required, not to be a malformed time.
const recoverBody = z.strictObject({
  since: z.iso.datetime({
    offset: true,
    error: (issue) =>
      issue.input === undefined
        ? "is required: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z"
        : "must be an ISO 8601 time, e.g. 2026-01-31T12:00:00Z",
  }),
});

/**
 * Operator actions on webhook deliveries, behind registerAdmin's `/admin/*`
 * bearer check (ADMIN_TOKEN; registered after it): send a test event,
 * redeliver one delivery, recover an endpoint's failed deliveries since a time.
 * Each answers 202: the work is a queued deliver job, its outcome shows in the
 * delivery's attempts. A disabled endpoint answers 409; enable it first.
 */
export function registerAdminWebhooksActions(app: App) {
  app.post(`/admin/webhooks/endpoints/${ID}/test`, noBody, async (c) => {
    const sent = await sendTestEvent(c.var.db, deliverQueueFor(c.var.config), c.req.param("id"));
    return c.json(sent, 202);
  });

  app.post(`/admin/webhooks/deliveries/${ID}/redeliver`, noBody, async (c) => {
    const queued = await redeliver(c.var.db, deliverQueueFor(c.var.config), c.req.param("id"));
    return c.json(queued, 202);
  });

  app.post(`/admin/webhooks/endpoints/${ID}/recover`, valid("json", recoverBody), async (c) => {
    const id = c.req.param("id");
    const since = new Date(c.req.valid("json").since);
    const recovered = await recoverFailed(c.var.db, deliverQueueFor(c.var.config), id, since);
    return c.json(recovered, 202);
  });
}
