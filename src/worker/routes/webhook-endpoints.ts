import { createEndpoint } from "../../domain/webhooks/create.ts";
import { getEndpoint } from "../../domain/webhooks/get.ts";
import { listEndpoints } from "../../domain/webhooks/list.ts";
import { removeEndpoint } from "../../domain/webhooks/remove.ts";
import { rotateSecret } from "../../domain/webhooks/rotate-secret.ts";
import {
  createEndpointInput,
  listEndpointsQuery,
  updateEndpointInput,
} from "../../domain/webhooks/schemas.ts";
import { updateEndpoint } from "../../domain/webhooks/update.ts";
import type { UrlPolicy } from "../../domain/webhooks/url-safety.ts";
import type { App } from "../new-app.ts";
import type { Config } from "../env.ts";
import { noBody, noQuery, valid, validFor } from "../validate.ts";
import { requireSecretsKey, webhookSecretsKey } from "../webhook-secrets-key.ts";
import { ID } from "./params.ts";

const urlPolicy = (config: Config): UrlPolicy => ({ allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_URLS });

/**
 * Webhook endpoints, for operators (behind the /admin bearer token, registered
 * after registerAdmin so its middleware runs first). A secret is in the answer
 * of a create and of a rotation, and nowhere else: every read shows the
 * endpoint through endpointView, which has no secret to show.
 */
export function registerWebhookEndpoints(app: App) {
  app.post(
    "/admin/webhooks/endpoints",
    requireSecretsKey,
    validFor("json", (config) => createEndpointInput(urlPolicy(config))),
    async (c) => {
      const key = await webhookSecretsKey(c.var.config);
      const created = await createEndpoint(c.var.db, key, c.req.valid("json"), urlPolicy(c.var.config));
      c.header("Location", `/admin/webhooks/endpoints/${created.endpoint.id}`);
      return c.json(created, 201);
    },
  );

  app.get("/admin/webhooks/endpoints", valid("query", listEndpointsQuery), async (c) => {
    return c.json(await listEndpoints(c.var.db, c.req.valid("query")));
  });

  app.get(`/admin/webhooks/endpoints/${ID}`, noQuery, async (c) => {
    return c.json(await getEndpoint(c.var.db, c.req.param("id")));
  });

  app.patch(
    `/admin/webhooks/endpoints/${ID}`,
    validFor("json", (config) => updateEndpointInput(urlPolicy(config))),
    async (c) => {
      const endpoint = await updateEndpoint(
        c.var.db,
        c.req.param("id"),
        c.req.valid("json"),
        urlPolicy(c.var.config),
      );
      return c.json({ endpoint });
    },
  );

  app.delete(`/admin/webhooks/endpoints/${ID}`, noBody, async (c) => {
    const id = c.req.param("id");
    await removeEndpoint(c.var.db, id);
    return c.json({ deleted: id });
  });

  app.post(`/admin/webhooks/endpoints/${ID}/rotate-secret`, noBody, requireSecretsKey, async (c) => {
    const key = await webhookSecretsKey(c.var.config);
    const rotated = await rotateSecret(c.var.db, key, c.req.param("id"), {
      windowHours: c.var.config.WEBHOOK_SECRET_ROTATION_HOURS,
    });
    return c.json({
      secret: rotated.secret,
      previousSecretExpiresAt: rotated.endpoint.previousSecretExpiresAt,
    });
  });
}
