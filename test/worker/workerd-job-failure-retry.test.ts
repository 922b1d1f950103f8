import { beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";
import { request, useWorkerd } from "../support/workerd.ts";

// An operator's retry of a job that exhausted its retries, end to end in workerd:
// the job fails for good, QStash's failure callback records it, the operator
// retries it, QStash delivers the new job to the subscription's route, the
// subscriber does its work this time, and the failure says its retry was delivered.
const t = useTestDatabase();
const stack = useWorkerd(t);
const ADMIN = () => ({ Authorization: `Bearer ${stack.env.ADMIN_TOKEN}` });
let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});

describe("retrying a job failure", () => {
  it("publishes a job QStash delivers to the subscriber, which runs it; once", async () => {
    // The mail API refuses the mail: notify.mail answers 489 and QStash gives up.
    stack.sink.respondWith({ status: 422, body: { error: "mailbox does not exist" } });
    let eventId: string;
    let failedMessageId: string;
    try {
      const created = await request(
        stack,
        "POST",
        "/suppliers",
        { name: "Retried Ltd" },
        { Authorization: `Bearer ${key}`, Prefer: "wait=5" },
      );
      eventId = created.body.events[0].id;
      failedMessageId = created.body.events[0].fanout["notify.mail"].messageId;
      expect((await stack.qstash.waitForSettled(failedMessageId)).state).toBe("ERROR");
      await waitFor(async () => {
        const { rows } = await t.pool.query("SELECT 1 FROM job_failures WHERE message_id = $1", [
          failedMessageId,
        ]);
        return rows.length === 1;
      }, 10_000);
    } finally {
      // The mailbox is fixed.
      stack.sink.respondWith(null);
    }
    const mailsFor = () =>
      stack.sink.received().filter((r) => r.headers["idempotency-key"] === `notify.mail:${eventId}`);
    const refusedMails = mailsFor().length;
    const listed = await request(stack, "GET", "/admin/job-failures", undefined, ADMIN());
    const failure = listed.body.jobFailures.find(
      (f: { messageId: string }) => f.messageId === failedMessageId,
    );
    expect(failure).toMatchObject({
      subscription: "notify.mail",
      retriedAt: null,
      retryMessageId: null,
      retryDeliveredAt: null,
    });

    const retried = await request(
      stack,
      "POST",
      `/admin/job-failures/${failure.id}/retry`,
      undefined,
      ADMIN(),
    );

    expect(retried.status).toBe(200);
    const retryMessageId: string = retried.body.retryMessageId;
    expect(retryMessageId).not.toBe(failedMessageId);
    const delivered = await stack.qstash.waitForSettled(retryMessageId);
    expect(delivered).toMatchObject({ state: "DELIVERED", url: `${stack.url}/jobs/notify.mail` });
    expect(delivered.attempts.at(-1)).toMatchObject({ status: 200 });
    // The subscriber ran: this time the mail went out, and was recorded once.
    await waitFor(() => mailsFor().length === refusedMails + 1, 10_000);
    expect(mailsFor().at(-1)!.json).toMatchObject({ subject: expect.stringContaining("Retried Ltd") });
    const { rows } = await t.pool.query(
      "SELECT count(*)::int AS n FROM mail_sends WHERE event_id = $1 AND sent_at IS NOT NULL",
      [eventId],
    );
    expect(rows[0].n).toBe(1);

    // Once: a second retry is refused and publishes nothing.
    const published = stack.qstash.messages().length;
    const again = await request(stack, "POST", `/admin/job-failures/${failure.id}/retry`, undefined, ADMIN());
    expect(again.status).toBe(409);
    expect(again.body.error.message).toContain(retryMessageId);
    expect(stack.qstash.messages()).toHaveLength(published);
    const after = await request(stack, "GET", "/admin/job-failures", undefined, ADMIN());
    // And the listing says the retry worked: its route took the job.
    expect(after.body.jobFailures).toEqual([
      expect.objectContaining({
        id: failure.id,
        retryMessageId,
        retriedAt: retried.body.retriedAt,
        retryDeliveredAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      }),
    ]);
    const { retryDeliveredAt } = after.body.jobFailures[0];
    expect(Date.parse(retryDeliveredAt)).toBeGreaterThanOrEqual(Date.parse(retried.body.retriedAt));
    expect(Date.parse(retryDeliveredAt)).toBeLessThanOrEqual(delivered.attempts.at(-1)!.finishedAt!);
  });
});
