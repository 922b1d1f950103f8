import { openSecret, SecretBoxError } from "./secret-box.ts";

/** The columns of a webhook_endpoints row that hold its secrets (see schema.ts). */
export interface EndpointSecrets {
  id: string;
  secretBox: string;
  previousSecretBox: string | null;
  previousSecretExpiresAt: Date | null;
}

/**
 * The secrets that sign a delivery to this endpoint at `now`: the current one
 * first, then the previous one while its rotation window is open, so a receiver
 * that has not yet switched keeps verifying. The window is checked here, at
 * signing time, rather than by clearing the column: an expired box left behind
 * must never sign again, whenever a sweep gets to it.
 *
 * Throws SecretBoxError when the current box does not open (a WEBHOOK_SECRETS_KEY
 * changed since it was sealed, or another endpoint's box), saying what fixes it. A
 * previous box that does not open is left out: after a changed key, the rotation
 * that cures it keeps the old box, which no key at hand opens, and every delivery
 * failed for the rotation's window.
 */
export async function signingSecrets(
  key: CryptoKey,
  endpoint: {
    id: string;
    secretBox: string;
    previousSecretBox: string | null;
    previousSecretExpiresAt: Date | null;
  },
  now: Date,
): Promise<string[]> {
  const current = await openSecret(key, endpoint.secretBox, endpoint.id).catch((error: unknown) => {
    if (!(error instanceof SecretBoxError)) throw error;
    throw new SecretBoxError(
      `webhook endpoint ${endpoint.id}'s signing secret does not open with WEBHOOK_SECRETS_KEY: was the key changed ` +
        "since the secret was sealed? Put the old key back, or rotate the endpoint's secret (its receiver then needs the new one)",
    );
  });
  const previousOpen =
    endpoint.previousSecretBox !== null &&
    endpoint.previousSecretExpiresAt !== null &&
    endpoint.previousSecretExpiresAt.getTime() > now.getTime();
  if (!previousOpen || endpoint.previousSecretBox === null) return [current];
  try {
    return [current, await openSecret(key, endpoint.previousSecretBox, endpoint.id)];
  } catch (error) {
    if (error instanceof SecretBoxError) return [current];
    throw error;
  }
}
