import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { webhookEndpoints } from "../schema.ts";
import { createEndpointInput, endpointView, type CreateEndpointInput, type EndpointView } from "./schemas.ts";
import { sealSecret } from "./secret-box.ts";
import { newSecret } from "./signing.ts";
import { DISABLED_BY_OPERATOR } from "./update.ts";
import type { UrlPolicy } from "./url-safety.ts";

/**
 * Creates an endpoint with a fresh signing secret. The secret is returned here
 * once, in the clear, and stored only sealed: after this answer nobody can read
 * it back, only rotate it.
 */
export async function createEndpoint(
  db: Db,
  key: CryptoKey,
  input: CreateEndpointInput,
  policy: UrlPolicy,
): Promise<{ endpoint: EndpointView; secret: string }> {
  const { enabled, ...values } = createEndpointInput(policy).parse(input);
  // The id is chosen here because the box is bound to it (AES-GCM additional data).
  const id = crypto.randomUUID();
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
    .returning();
  if (!row) throw new Error("createEndpoint: INSERT returned no row");
  return { endpoint: endpointView(row), secret };
}
