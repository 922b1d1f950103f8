import { getScopedEvent } from "../../outbox/index.ts";
import type { App } from "../new-app.ts";
import { noQuery } from "../validate.ts";
import { ApiError } from "../errors.ts";
import { ID } from "./params.ts";

/**
 * The poll link of a 202 receipt (`Location: /events/<id>`). It takes the same
 * API key as the writes that hand it out, and shows only events of the key's
 * scope; the operator token is not needed. It shows the receipt only (type, state, fan-out), never the
 * payload or the relay's errors; operators see those at /admin/events/:id.
 */
export function registerEventsGet(app: App) {
  app.get(`/events/${ID}`, noQuery, async (c) => {
    // Another scope's event is as unknown as a missing one, and as quick to say so.
    const event = await getScopedEvent(c.var.pool, c.req.param("id"), c.var.tenant.scope);
    // A poll link followed after retention found a bare "not found"; the reasons are said
    // without telling another scope's event from a missing one.
    if (!event)
      throw new ApiError(
        "NOT_FOUND",
        `event ${c.req.param("id")} not found: not recorded in this API key's scope, or deleted once ` +
          `fanned out more than ${c.var.config.RETENTION_DAYS} days ago`,
      );
    return c.json({
      event: {
        id: event.id,
        type: event.type,
        subject: event.subject,
        createdAt: event.createdAt,
        state: event.state,
        fannedOutAt: event.fannedOutAt,
        fanout: event.fanout,
      },
    });
  });
}
