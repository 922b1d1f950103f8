import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { IllegalTransitionError, NotFoundError } from "../errors.ts";
import { queryRows } from "./rows.ts";

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
