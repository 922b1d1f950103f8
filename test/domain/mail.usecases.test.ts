import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { randomUUID } from "node:crypto";
import { httpMailer, MailError } from "../../src/domain/mail/mailer.ts";
import { sendMailOnce } from "../../src/domain/mail/send-once.ts";
import { startMailSink, type MailSink } from "../../infra/mail-sink.ts";
import { useTestDatabase } from "../support/db.ts";

const t = useTestDatabase();
let sink: MailSink;
let mailer: ReturnType<typeof httpMailer>;

beforeAll(async () => {
  sink = await startMailSink({ log: () => undefined });
  mailer = httpMailer({ url: `${sink.url}/mail` });
});
beforeEach(() => {
  sink.clear();
  sink.respondWith(null);
});
afterAll(() => sink?.close());

const job = (eventId = randomUUID()) => ({
  subscription: "notify.mail",
  eventId,
  mail: { to: "ops@example.test", subject: "Supplier activated", text: "Acme is live." },
});

describe("sendMailOnce", () => {
  it("sends once and records the provider's id; a redelivered job sends nothing", async () => {
    const j = job();
    expect(await sendMailOnce(t.db, mailer, j)).toEqual({ sent: true, providerMessageId: "sink-1" });
    expect(await sendMailOnce(t.db, mailer, j)).toEqual({ sent: false, reason: "already sent" });
    expect(sink.received()).toHaveLength(1);
    expect(sink.received()[0]!.headers["idempotency-key"]).toBe(`notify.mail:${j.eventId}`);
    const { rows } = await t.pool.query("SELECT provider_message_id FROM mail_sends WHERE event_id = $1", [
      j.eventId,
    ]);
    expect(rows).toEqual([{ provider_message_id: "sink-1" }]);
  });

  it("a refusal with no body says so, rather than end on a colon", async () => {
    sink.respondWith({ status: 503 });
    try {
      await expect(sendMailOnce(t.db, mailer, job())).rejects.toMatchObject({
        message: "mail API answered 503 with an empty body",
      });
    } finally {
      sink.respondWith(null);
    }
  });

  it("two concurrent deliveries of the same job send one mail", async () => {
    const j = job();
    const outcomes = await Promise.all([sendMailOnce(t.db, mailer, j), sendMailOnce(t.db, mailer, j)]);
    expect(outcomes.map((o) => o.sent).sort()).toEqual([false, true]);
    expect(sink.received()).toHaveLength(1);
  });

  it("a provider outage leaves nothing recorded, says retry, and the retry sends with the same key", async () => {
    const j = job();
    sink.respondWith({ status: 503, body: { error: "down" } });
    const failed = sendMailOnce(t.db, mailer, j);
    await expect(failed).rejects.toBeInstanceOf(MailError);
    await expect(failed).rejects.toMatchObject({
      retry: true,
      message: 'mail API answered 503: {"error":"down"}',
    });
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM mail_sends WHERE event_id = $1", [
      j.eventId,
    ]);
    expect(rows[0].n).toBe(0);

    sink.respondWith(null);
    expect((await sendMailOnce(t.db, mailer, j)).sent).toBe(true);
    const keys = sink.received().map((r) => [r.status, r.headers["idempotency-key"]]);
    expect(keys).toEqual([
      [503, `notify.mail:${j.eventId}`],
      [200, `notify.mail:${j.eventId}`],
    ]);
  });

  it("a mail the provider rejects is not worth retrying", async () => {
    sink.respondWith({ status: 422, body: { error: "bad address" } });
    await expect(sendMailOnce(t.db, mailer, job())).rejects.toMatchObject({ retry: false });
  });
});
