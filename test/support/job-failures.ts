import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, beforeEach } from "vitest";
import { startQStashDev, type QStashDev } from "../../infra/qstash-dev/server.ts";
import type { Db } from "../../src/domain/db.ts";
import { recordJobFailure, type JobFailure } from "../../src/domain/job-failures/record.ts";
import { safeJson } from "../../src/domain/text.ts";
import type { TestDatabase } from "./db.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A job body exactly as the relay writes one (JobBody's key order), for `subscription`. */
export function relayJobBody(subscription: string, event: Record<string, unknown> = {}): string {
  return JSON.stringify({
    subscription,
    event: {
      id: randomUUID(),
      seq: 1,
      type: "supplier.connected",
      subject: randomUUID(),
      scope: null,
      payload: { name: "Retried Ltd", status: "connected" },
      createdAt: new Date().toISOString(),
      ...event,
    },
    coalesced: [],
  });
}

/**
 * A job of `subscription` for event `eventId` that ran out of its 5 retries,
 * recorded as the failure callback records one: the failure row and its
 * subscription's one open `job.failed` alert (ADR 0037). Returns the failure's id.
 */
export async function jobRanOutOfRetries(
  t: Pick<TestDatabase, "db" | "pool">,
  subscription: string,
  eventId: string,
  messageId = `msg_${randomUUID().replaceAll("-", "")}`,
): Promise<number> {
  await recordJobFailure(t.db as unknown as Db, {
    messageId,
    subscription,
    eventId,
    status: 500,
    body: relayJobBody(subscription, { id: eventId }),
    responseBody: null,
    dlqId: null,
    retried: 5,
  });
  const { rows } = await t.pool.query("SELECT id::int FROM job_failures WHERE message_id = $1", [messageId]);
  return rows[0].id as number;
}

/**
 * A job failure as the failure callback records one: by default a `notify.mail` job
 * of ours. Returns its id.
 */
export async function insertJobFailure(
  pool: pg.Pool,
  fields: { subscription?: string; body?: string; messageId?: string } = {},
): Promise<number> {
  const subscription = fields.subscription ?? "notify.mail";
  const body = fields.body ?? relayJobBody(subscription);
  // The event id as the recording takes it from the body (failed-job.ts): only a uuid one.
  const eventId = (safeJson(body) as { event?: { id?: unknown } } | undefined)?.event?.id;
  const { rows } = await pool.query(
    `INSERT INTO job_failures (message_id, subscription, event_id, status, body, response_body)
     VALUES ($1, $2, $3, 500, $4, 'mail API down') RETURNING id`,
    [
      fields.messageId ?? `msg_${randomUUID().replaceAll("-", "")}`,
      subscription,
      typeof eventId === "string" && UUID.test(eventId) ? eventId : null,
      body,
    ],
  );
  return Number(rows[0].id);
}

export async function jobFailureRow(pool: pg.Pool, id: number) {
  const { rows } = await pool.query(`SELECT retried_at, retry_message_id FROM job_failures WHERE id = $1`, [
    id,
  ]);
  return rows[0] as { retried_at: Date | null; retry_message_id: string | null };
}

/**
 * The QStash dev server of a job-failure test file, with delivery paused so what a
 * retry publishes stays there to be looked at; `job_failures` emptied before each test.
 */
export function usePausedQStash(t: TestDatabase): { readonly qstash: QStashDev } {
  const ctx = {} as { qstash: QStashDev };
  beforeAll(async () => {
    ctx.qstash = await startQStashDev({ log: () => undefined });
  });
  afterAll(() => ctx.qstash?.close());
  beforeEach(async () => {
    await t.pool.query("TRUNCATE job_failures");
    ctx.qstash.reset();
    ctx.qstash.pauseDelivery();
  });
  return ctx;
}

/** The CLI's environment for publishing commands against that server (and the test's database). */
export function cliEnvWithQStash(t: TestDatabase, paused: { readonly qstash: QStashDev }) {
  return {
    DATABASE_URL: t.url,
    QSTASH_URL: paused.qstash.url,
    QSTASH_TOKEN: paused.qstash.token,
    PUBLIC_URL: "http://127.0.0.1:8787",
  };
}

/**
 * A job that ran out of retries, as the failure callback or the sweep's dead letters
 * hand it to recordJobFailures: a notify.mail job with a fresh message id and no
 * answer, unless `fields` say otherwise.
 */
export function failedJob(fields: Partial<JobFailure> = {}): JobFailure {
  return {
    messageId: `msg_${randomUUID()}`,
    subscription: "notify.mail",
    eventId: null,
    status: 500,
    body: relayJobBody("notify.mail"),
    responseBody: null,
    dlqId: null,
    retried: 5,
    ...fields,
  };
}
