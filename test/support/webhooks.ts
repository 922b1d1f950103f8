import type { IncomingHttpHeaders } from "node:http";
import type pg from "pg";
import { Webhook } from "standardwebhooks";
import { importSecretsKey, newSecretsKey, sealSecret } from "../../src/domain/webhooks/secret-box.ts";
import { newSecret } from "../../src/domain/webhooks/signing.ts";

/** One WEBHOOK_SECRETS_KEY per test file: the binding the Worker gets, and the key fixtures seal with. */
export function useSecretsKey() {
  const base64 = newSecretsKey();
  return { base64, key: importSecretsKey(base64) };
}

export interface EndpointFixture {
  url: string;
  scope?: string | null;
  types?: string[];
  enabled?: boolean;
  description?: string;
  /** A rotation in progress: this secret keeps signing until `previousExpiresAt`. */
  previousSecret?: string;
  previousExpiresAt?: Date;
}

/**
 * Inserts an endpoint row as the admin API would (secret sealed under the key,
 * bound to the row's id), so delivery tests do not depend on the API's routes.
 */
export async function insertEndpoint(
  pool: pg.Pool,
  key: Promise<CryptoKey>,
  fixture: EndpointFixture,
): Promise<{ id: string; secret: string }> {
  const id = crypto.randomUUID();
  const secret = newSecret();
  const k = await key;
  await pool.query(
    `INSERT INTO webhook_endpoints (id, url, scope, types, enabled, disabled_reason, secret_box,
                                    previous_secret_box, previous_secret_expires_at, description)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [
      id,
      fixture.url,
      fixture.scope ?? null,
      fixture.types ?? ["*"],
      fixture.enabled ?? true,
      fixture.enabled === false ? "disabled by the test" : null,
      await sealSecret(k, secret, id),
      fixture.previousSecret ? await sealSecret(k, fixture.previousSecret, id) : null,
      fixture.previousExpiresAt ?? null,
      fixture.description ?? "",
    ],
  );
  return { id, secret };
}

/** Node's header object as the flat record `standardwebhooks` verifies. */
export function flatHeaders(headers: IncomingHttpHeaders | Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : String(v ?? "")]),
  );
}

/** Verifies a received request with the independent `standardwebhooks` package; throws when it does not verify. */
export function verifyWebhook(
  secret: string,
  body: string,
  headers: IncomingHttpHeaders | Record<string, string>,
) {
  return new Webhook(secret).verify(body, flatHeaders(headers)) as {
    type: string;
    timestamp: string;
    data: { id: string; subject: string; scope: string | null; payload: unknown };
  };
}
