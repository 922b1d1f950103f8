import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { IllegalTransitionError, NotFoundError } from "../errors.ts";
import { queryRows, textArray } from "./rows.ts";

export interface EndpointState {
  id: string;
  scope: string | null;
  enabled: boolean;
}

/** The endpoint an operator action targets; NotFound, or an illegal transition when it is disabled. */
export async function enabledEndpoint(db: Db, endpointId: string, action: string): Promise<EndpointState> {
  const [endpoint] = await queryRows<EndpointState>(
    db,
    sql`SELECT id, scope, enabled FROM webhook_endpoints WHERE id = ${endpointId} FOR SHARE`,
  );
  if (!endpoint) throw new NotFoundError("webhook endpoint", endpointId);
  if (!endpoint.enabled)
    throw new IllegalTransitionError("webhook endpoint", endpointId, "disabled", action, "enable it first");
  return endpoint;
}

/** The alerts about one endpoint, by kind, as the delivery engine raises them (details.endpointId). */
export type EndpointAlertKind =
  | "webhook.endpoint_disabled"
  | "webhook.delivery_failed"
  | "webhook.endpoint_lagging"
  | "webhook.endpoint_failing";

/**
 * Resolves an endpoint's open alerts of these kinds: the operator has answered
 * them, as a requeue answers a poisoned event's. Re-enabling answers the alert
 * that said it was disabled; deleting the endpoint answers all of them (what they
 * point at is gone).
 */
export async function resolveEndpointAlerts(
  db: Db,
  endpointId: string,
  kinds: readonly EndpointAlertKind[],
  why: "the endpoint was enabled again" | "the endpoint was deleted",
): Promise<void> {
  // Saying why, as every alert that resolves itself does (the alert walkthrough).
  await db.execute(sql`
    UPDATE outbox_alerts SET resolved_at = now(), message = message || ${`; resolved: ${why}`}
     WHERE resolved_at IS NULL AND kind = ANY(${textArray(kinds)}::text[])
       AND details->>'endpointId' = ${endpointId}`);
}
