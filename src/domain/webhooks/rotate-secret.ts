import { eq, sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";
import { endpointView, type EndpointView } from "./schemas.ts";
import { sealSecret } from "./secret-box.ts";
import { newSecret } from "./signing.ts";

export interface RotateOptions {
  /** How long the outgoing secret keeps signing beside the new one (WEBHOOK_SECRET_ROTATION_HOURS); 0: not at all. */
  windowHours: number;
  now?: Date;
}

/**
 * Gives an endpoint a new secret. The current one becomes the previous one and
 * keeps signing (a second `v1,` entry in `webhook-signature`) until the window
 * closes, so the receiver can switch without rejecting a delivery. A secret
 * already in its window is dropped: only the two newest secrets ever sign.
 *
 * One UPDATE moves current → previous, so two rotations at once cannot both
 * keep the same outgoing secret or lose the one in between.
 */
export async function rotateSecret(
  db: Db,
  key: CryptoKey,
  id: string,
  options: RotateOptions,
): Promise<{ secret: string; endpoint: EndpointView }> {
  const now = options.now ?? new Date();
  const secret = newSecret();
  const box = await sealSecret(key, secret, id);
  const keep = options.windowHours > 0;
  const t = webhookEndpoints;
  const [row] = await db
    .update(t)
    .set({
      secretBox: box,
      previousSecretBox: keep ? sql`${t.secretBox}` : null,
      previousSecretExpiresAt: keep ? new Date(now.getTime() + options.windowHours * 3_600_000) : null,
      updatedAt: sql`now()`,
    })
    .where(eq(t.id, id))
    .returning();
  if (!row) throw new NotFoundError("webhook endpoint", id);
  return { secret, endpoint: endpointView(row, now) };
}
