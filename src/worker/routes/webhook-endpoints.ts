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
import { EndpointChangedError, updateEndpointVersioned } from "../../domain/webhooks/update.ts";
import type { UrlPolicy } from "../../domain/webhooks/url-safety.ts";
import type { App } from "../new-app.ts";
import type { Config } from "../env.ts";
import { ApiError } from "../errors.ts";
import { noBody, noQuery, valid, validFor } from "../validate.ts";
import { requireSecretsKey, webhookSecretsKey } from "../webhook-secrets-key.ts";
import { ID } from "./params.ts";

const urlPolicy = (config: Config): UrlPolicy => ({ allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_URLS });

/**
 * The ETag an If-Match header asks for: none without one or with `*` (any current
 * endpoint, which the update needs anyway), else its one entity-tag. Ours are hex
 * digests, so a tag that is not one, or a weak one (If-Match compares strongly),
 * matches no endpoint: the update then finds none as asked and answers 412, as RFC
 * 9110 has it. A list of tags is refused: one is what a read hands out.
 */
function ifMatchEtag(header: string | undefined): string | undefined {
  if (header === undefined || header.trim() === "*") return undefined;
  const tags = header.split(",").map((tag) => tag.trim());
  if (tags.length > 1)
    throw new ApiError("BAD_REQUEST", "If-Match takes one ETag here: the one a GET or PATCH answered", [
      { path: "header.if-match", message: "takes one ETag" },
    ]);
  const strong = /^"([0-9a-f]{64})"$/.exec(tags[0]!);
  // Never a digest: no endpoint's version, so the update answers 412 for it.
  return strong ? strong[1]! : "-";
}

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
    const { etag, ...shown } = await getEndpoint(c.var.db, c.req.param("id"));
    c.header("ETag", `"${etag}"`);
    return c.json(shown);
  });

  // With If-Match (the ETag a GET or PATCH answered), only if no one changed the
  // endpoint since: two scripts editing it at once undid each other's change unseen (ADR 0042).
  app.patch(
    `/admin/webhooks/endpoints/${ID}`,
    validFor("json", (config) => updateEndpointInput(urlPolicy(config))),
    async (c) => {
      const id = c.req.param("id");
      const ifEtag = ifMatchEtag(c.req.header("if-match"));
      const { endpoint, etag } = await updateEndpointVersioned(
        c.var.db,
        id,
        c.req.valid("json"),
        urlPolicy(c.var.config),
        { ifEtag },
      ).catch((error: unknown) => {
        if (error instanceof EndpointChangedError)
          throw new ApiError(
            "PRECONDITION_FAILED",
            `webhook endpoint ${id} is not as the If-Match ETag says (changed since it was read); ` +
              "nothing was saved: GET it again, then send the change with its ETag",
          );
        throw error;
      });
      c.header("ETag", `"${etag}"`);
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
