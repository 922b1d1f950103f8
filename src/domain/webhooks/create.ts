import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { webhookEndpoints } from "../schema.ts";
import { createEndpointInput, endpointView, type CreateEndpointInput, type EndpointView } from "./schemas.ts";
import { sealSecret } from "./secret-box.ts";
import { newSecret } from "./signing.ts";
import { queryRows } from "./rows.ts";
import { DISABLED_BY_OPERATOR } from "./update.ts";
import type { UrlPolicy } from "./url-safety.ts";

/** An endpoint with the id asked for exists already: the form that creates it was sent twice. */
export class EndpointExistsError extends Error {
  constructor(readonly id: string) {
    super(`webhook endpoint ${id} exists already`);
  }
}

/**
 * Creates an endpoint with a fresh signing secret. The secret is returned here
 * once, in the clear, and stored only sealed: after this answer nobody can read
 * it back, only rotate it. `id`, when given, is the one the dashboard's form was
 * shown with: sent again (a reload of the page that showed the secret), it creates
 * nothing and throws EndpointExistsError, never a second endpoint with a second secret.
 */
export async function createEndpoint(
  db: Db,
  key: CryptoKey,
  input: CreateEndpointInput,
  policy: UrlPolicy,
  options: { id?: string } = {},
): Promise<{ endpoint: EndpointView; secret: string }> {
  const { enabled, ...values } = createEndpointInput(policy).parse(input);
  // The id is chosen here because the box is bound to it (AES-GCM additional data).
  const id = options.id ?? crypto.randomUUID();
  const secret = newSecret();
  const [row] = await db
    .insert(webhookEndpoints)
    .values({
      id,
      ...values,
      // Created off reads as turned off by an operator: the table requires a reason.
      ...(enabled ? {} : { enabled, disabledReason: DISABLED_BY_OPERATOR, disabledAt: sql`now()` }),
      secretBox: await sealSecret(key, secret, id),
    })
    .onConflictDoNothing({ target: webhookEndpoints.id })
    .returning();
  if (!row) throw new EndpointExistsError(id);
  return { endpoint: endpointView(row), secret };
}

/** The scopes an endpoint may be made for, as the dashboard offers them: those of the API keys not revoked. */
export async function knownScopes(db: Db): Promise<string[]> {
  const rows = await queryRows<{ scope: string }>(
    db,
    sql`SELECT DISTINCT scope FROM api_keys WHERE scope IS NOT NULL AND revoked_at IS NULL ORDER BY scope LIMIT 100`,
  );
  return rows.map((r) => r.scope);
}
