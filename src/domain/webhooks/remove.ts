import { eq } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";

/**
 * Deletes an endpoint, and with it (ON DELETE CASCADE) its deliveries and their
 * attempts. A `webhook.deliver` job still in flight finds no delivery and stops.
 */
export async function removeEndpoint(db: Db, id: string): Promise<void> {
  const deleted = await db
    .delete(webhookEndpoints)
    .where(eq(webhookEndpoints.id, id))
    .returning({ id: webhookEndpoints.id });
  if (deleted.length === 0) throw new NotFoundError("webhook endpoint", id);
}
