import { eq } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";
import { resolveEndpointAlerts } from "./endpoint-state.ts";

/**
 * Deletes an endpoint, and with it (ON DELETE CASCADE) its deliveries and their
 * attempts. A `webhook.deliver` job still in flight finds no delivery and stops.
 * Its open alerts are resolved in the same transaction: they point at nothing now.
 */
export async function removeEndpoint(db: Db, id: string): Promise<void> {
  await db.transaction(async (tx) => {
    const deleted = await tx
      .delete(webhookEndpoints)
      .where(eq(webhookEndpoints.id, id))
      .returning({ id: webhookEndpoints.id });
    if (deleted.length === 0) throw new NotFoundError("webhook endpoint", id);
    await resolveEndpointAlerts(
      tx,
      id,
      [
        "webhook.endpoint_disabled",
        "webhook.delivery_failed",
        "webhook.endpoint_lagging",
        "webhook.endpoint_failing",
      ],
      "the endpoint was deleted",
    );
  });
}
