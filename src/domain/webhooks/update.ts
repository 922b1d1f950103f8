import { eq, sql } from "drizzle-orm";
import type { PgUpdateSetSource } from "drizzle-orm/pg-core";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";
import { endpointView, updateEndpointInput, type EndpointView, type UpdateEndpointInput } from "./schemas.ts";
import type { UrlPolicy } from "./url-safety.ts";

/** Why an endpoint is disabled when an operator, not the delivery engine, turned it off. */
export const DISABLED_BY_OPERATOR = "disabled by an operator";

/**
 * Changes url, types, description or enabled; never the scope (see schemas.ts).
 * Turning an endpoint off records a reason (the table requires one); turning it
 * back on forgets the reason and the failure streak, so the auto-disable sweep
 * measures the endpoint afresh instead of disabling it again at once.
 */
export async function updateEndpoint(
  db: Db,
  id: string,
  input: UpdateEndpointInput,
  policy: UrlPolicy,
): Promise<EndpointView> {
  const patch = updateEndpointInput(policy).parse(input);
  const t = webhookEndpoints;
  const set: PgUpdateSetSource<typeof t> = { updatedAt: sql`now()` };
  if (patch.url !== undefined) set.url = patch.url;
  if (patch.types !== undefined) set.types = patch.types;
  if (patch.description !== undefined) set.description = patch.description;
  if (patch.enabled === true) {
    // Only an endpoint that was off changes state; re-enabling an enabled one
    // must not wipe the failing streak the delivery engine is tracking.
    set.enabled = true;
    set.disabledReason = sql`CASE WHEN ${t.enabled} THEN ${t.disabledReason} ELSE NULL END`;
    set.disabledAt = sql`CASE WHEN ${t.enabled} THEN ${t.disabledAt} ELSE NULL END`;
    set.failingSince = sql`CASE WHEN ${t.enabled} THEN ${t.failingSince} ELSE NULL END`;
  } else if (patch.enabled === false) {
    // Disabling a disabled endpoint keeps the first reason (e.g. "410 Gone").
    set.enabled = false;
    set.disabledReason = sql`CASE WHEN ${t.enabled} THEN ${DISABLED_BY_OPERATOR} ELSE ${t.disabledReason} END`;
    set.disabledAt = sql`CASE WHEN ${t.enabled} THEN now() ELSE ${t.disabledAt} END`;
  }
  const [row] = await db.update(t).set(set).where(eq(t.id, id)).returning();
  if (!row) throw new NotFoundError("webhook endpoint", id);
  return endpointView(row);
}
