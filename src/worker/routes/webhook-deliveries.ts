import { getDelivery, listDeliveries } from "../../domain/webhooks/deliveries.ts";
import { listDeliveriesQuery } from "../../domain/webhooks/schemas.ts";
import type { App } from "../new-app.ts";
import { noQuery, valid } from "../validate.ts";
import { ID } from "./params.ts";

/** Reads of the delivery log the `webhook.deliver` handler writes (behind the /admin token). */
export function registerWebhookDeliveries(app: App) {
  app.get(`/admin/webhooks/endpoints/${ID}/deliveries`, valid("query", listDeliveriesQuery), async (c) => {
    return c.json(await listDeliveries(c.var.db, c.req.param("id"), c.req.valid("query")));
  });

  app.get(`/admin/webhooks/deliveries/${ID}`, noQuery, async (c) => {
    return c.json(await getDelivery(c.var.db, c.req.param("id")));
  });
}
