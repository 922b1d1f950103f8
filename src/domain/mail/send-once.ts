import { and, eq, sql } from "drizzle-orm";
import { mailSends } from "../schema.ts";
import type { Db } from "../db.ts";
import type { Mail, Mailer } from "./mailer.ts";

export type SendOutcome =
  { sent: true; providerMessageId: string | null } | { sent: false; reason: "already sent" };

/**
 * Sends the mail for (subscription, event) at most once per successful handling,
 * however often QStash delivers the job:
 * - the (subscription, event_id) row is claimed and row-locked in a transaction
 *   that stays open across the send, so a concurrent duplicate delivery waits
 *   and then finds the mail sent;
 * - the row commits only together with `sent_at`, so a failed or interrupted send
 *   leaves nothing behind and the retry sends again;
 * - that retry reuses the idempotency key, which covers the one window the table
 *   cannot: the provider accepted the mail but the commit never happened.
 * Holding a transaction over one bounded HTTP call is the price of that lock.
 */
export async function sendMailOnce(
  db: Db,
  mailer: Mailer,
  job: { subscription: string; eventId: string; mail: Mail },
): Promise<SendOutcome> {
  return db.transaction(async (tx) => {
    await tx
      .insert(mailSends)
      .values({
        subscription: job.subscription,
        eventId: job.eventId,
        recipient: job.mail.to,
        subjectLine: job.mail.subject,
      })
      .onConflictDoNothing();
    const [row] = await tx
      .select({ id: mailSends.id, sentAt: mailSends.sentAt })
      .from(mailSends)
      .where(and(eq(mailSends.subscription, job.subscription), eq(mailSends.eventId, job.eventId)))
      .for("update");
    if (!row) throw new Error("sendMailOnce: claimed row not found");
    if (row.sentAt) return { sent: false, reason: "already sent" };

    const { providerMessageId } = await mailer.send(job.mail, {
      idempotencyKey: `${job.subscription}:${job.eventId}`,
    });
    await tx
      .update(mailSends)
      .set({ sentAt: sql`now()`, providerMessageId })
      .where(eq(mailSends.id, row.id));
    return { sent: true, providerMessageId };
  });
}
