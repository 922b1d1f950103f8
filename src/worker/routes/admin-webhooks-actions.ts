import { z } from "zod";
import { recoverDeliveries, recoverSince } from "../../domain/webhooks/recover.ts";
import { redeliver } from "../../domain/webhooks/redeliver.ts";
import { sendTestEvent } from "../../domain/webhooks/send-test.ts";
import type { App } from "../new-app.ts";
import { noBody, valid } from "../validate.ts";
import { deliverQueueFor, queuedOrRefused } from "../webhooks.ts";
import { ID } from "./params.ts";

const recoverBody = z.strictObject({ since: recoverSince });

/**
 * Operator actions on webhook deliveries, behind registerAdmin's `/admin/*`
 * bearer check (ADMIN_TOKEN; registered after it): send a test event,
 * redeliver one delivery, recover an endpoint's deliveries since a time (those
 * that gave up or wait for a retry: recover.ts).
 * Each answers 202: the work is a queued deliver job, its outcome shows in the
 * delivery's attempts (a recover that found nothing to re-send is a 200). A disabled endpoint answers 409; enable it first. A job
 * QStash did not take answers 503, with nothing changed (queuedOrRefused).
 */
export function registerAdminWebhooksActions(app: App) {
  app.post(`/admin/webhooks/endpoints/${ID}/test`, noBody, async (c) => {
    const id = c.req.param("id");
    const sent = await queuedOrRefused(`webhook endpoint ${id}`, () =>
      sendTestEvent(c.var.db, deliverQueueFor(c.var.config), id),
    );
    return c.json(sent, 202);
  });

  app.post(`/admin/webhooks/deliveries/${ID}/redeliver`, noBody, async (c) => {
    const id = c.req.param("id");
    const queued = await queuedOrRefused(`delivery ${id}`, () =>
      redeliver(c.var.db, deliverQueueFor(c.var.config), id),
    );
    return c.json(queued, 202);
  });

  app.post(`/admin/webhooks/endpoints/${ID}/recover`, valid("json", recoverBody), async (c) => {
    const id = c.req.param("id");
    const since = new Date(c.req.valid("json").since);
    const recovered = await queuedOrRefused(`the deliveries to recover of webhook endpoint ${id}`, () =>
      recoverDeliveries(c.var.db, deliverQueueFor(c.var.config), id, since),
    );
    // 202 says work was queued; with no delivery to re-send, none was.
    return c.json(recovered, recovered.recovered > 0 ? 202 : 200);
  });
}
