import { openSecret } from "./secret-box.ts";

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
 * Throws SecretBoxError when a box does not open (wrong key, another endpoint's box).
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
  const current = await openSecret(key, endpoint.secretBox, endpoint.id);
  const previousOpen =
    endpoint.previousSecretBox !== null &&
    endpoint.previousSecretExpiresAt !== null &&
    endpoint.previousSecretExpiresAt.getTime() > now.getTime();
  if (!previousOpen || endpoint.previousSecretBox === null) return [current];
  return [current, await openSecret(key, endpoint.previousSecretBox, endpoint.id)];
}
