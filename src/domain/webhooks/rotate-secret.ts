import { and, eq, sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { DomainError, NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";
import { endpointView, type EndpointView } from "./schemas.ts";
import { sealSecret } from "./secret-box.ts";
import { newSecret } from "./signing.ts";

export interface RotateOptions {
  /** How long the outgoing secret keeps signing beside the new one (WEBHOOK_SECRET_ROTATION_HOURS); 0: not at all. */
  windowHours: number;
  now?: Date;
  /**
   * Rotate only while the current secret is still this one (a `secretVersion`
   * read earlier); otherwise throw SecretAlreadyRotatedError and change nothing.
   * Without it the rotation is unconditional, as the admin API's is.
   */
  ifVersion?: string;
}

/**
 * Names the endpoint's current secret without revealing it: a digest of the
 * sealed box, which has a fresh random IV at every rotation, so the version
 * changes with each rotation and with nothing else. A digest of ciphertext says
 * nothing about the secret, so it may sit in a page.
 */
const secretVersionSql = sql<string>`md5(${webhookEndpoints.secretBox})`;

/** The version of the endpoint's current secret, for `ifVersion`; undefined when there is no such endpoint. */
export async function secretVersion(db: Db, id: string): Promise<string | undefined> {
  const [row] = await db
    .select({ version: secretVersionSql })
    .from(webhookEndpoints)
    .where(eq(webhookEndpoints.id, id));
  return row?.version;
}

/** A rotation asked for against a secret that another rotation has already replaced. */
export class SecretAlreadyRotatedError extends DomainError {
  constructor(
    id: string,
    /** When the endpoint last changed: the later rotation, unless something else changed it since. */
    readonly changedAt: Date,
  ) {
    super("illegal_transition", `webhook endpoint ${id}: that secret was already rotated; nothing changed`);
  }
}

/**
 * Gives an endpoint a new secret. The current one becomes the previous one and
 * keeps signing (a second `v1,` entry in `webhook-signature`) until the window
 * closes, so the receiver can switch without rejecting a delivery. A secret
 * already in its window is dropped: only the two newest secrets ever sign.
 *
 * One UPDATE moves current → previous, so two rotations at once cannot both
 * keep the same outgoing secret or lose the one in between. With `ifVersion`
 * the same UPDATE is the compare-and-set: of two rotations of one version, the
 * second re-reads the row the first committed, no longer matches, and rotates
 * nothing; so a form sent twice (a reload of its answer) cannot retire the
 * secret the receiver still uses.
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
    .where(
      and(
        eq(t.id, id),
        options.ifVersion === undefined ? undefined : eq(secretVersionSql, options.ifVersion),
      ),
    )
    .returning();
  if (row) return { secret, endpoint: endpointView(row, now) };
  if (options.ifVersion !== undefined) {
    const [current] = await db.select({ updatedAt: t.updatedAt }).from(t).where(eq(t.id, id));
    if (current) throw new SecretAlreadyRotatedError(id, current.updatedAt);
  }
  throw new NotFoundError("webhook endpoint", id);
}
