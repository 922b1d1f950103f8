import { sql } from "drizzle-orm";
import type { Db } from "../db.ts";
import { disabledAlertMessage } from "./auto-disable.ts";
import { nextRetryDelaySeconds, parseRetryAfter } from "./retry-schedule.ts";
import { queryRows } from "./rows.ts";
import { alertEventIdOf } from "./send-test.ts";
import { signingSecrets } from "./secrets.ts";
import { signHeaders } from "./signing.ts";
import { checkWebhookUrl, type UrlPolicy } from "./url-safety.ts";

/** A POST to an endpoint may take this long; then it is a `timeout` attempt and retried. */
export const DELIVERY_TIMEOUT_MS = 15_000;
/**
 * How long one delivery of a job owns its row. Longer than the POST timeout plus
 * the recording, so a live attempt never loses its lease. A Worker killed
 * mid-attempt leaves it held: the job's next attempt takes it over (deliverWebhook).
 */
export const LEASE_SECONDS = 60;
/** The attempt log keeps this much of a response body. */
export const RESPONSE_BODY_BYTES = 2048;
/** Response headers worth keeping for an operator looking at a failed attempt. */
const KEPT_HEADERS = ["content-type", "content-length", "retry-after", "location", "x-request-id"];

export interface DeliverDeps {
  db: Db;
  /** WEBHOOK_SECRETS_KEY, imported: opens the endpoint's secret boxes. */
  secretsKey: CryptoKey;
  /** Seconds before each retry (retry-schedule.ts, or the binding's override). */
  schedule: readonly number[];
  /**
   * The URL rules of today's bindings, checked again before every POST: an endpoint
   * saved under other rules (WEBHOOK_ALLOW_PRIVATE_URLS on, an older release's
   * ranges) must not be posted to under these.
   */
  urlPolicy: UrlPolicy;
  fetch?: typeof fetch;
  timeoutMs?: number;
}

/** Why an attempt got no usable HTTP answer. */
export type AttemptError = "timeout" | "refused" | "dns" | "network";

/** What one delivery of a `webhook.deliver` job came to; the job route turns it into QStash's answer. */
export type DeliverOutcome =
  /** The endpoint answered 2xx. */
  | { kind: "delivered"; status: number }
  /**
   * Nothing to send: delivered or failed already, the row is gone (its endpoint was
   * deleted), or another job carries it now (a redeliver replaced this one).
   */
  | { kind: "settled"; status: "delivered" | "failed" | "missing" | "superseded" }
  /** Another delivery of this job holds the lease: come back once it has expired. */
  | { kind: "busy"; retryAfterSeconds: number }
  /** The endpoint is disabled: the delivery is failed without a POST. */
  | { kind: "endpoint_disabled" }
  /** 410 Gone: the endpoint is disabled, the delivery failed, nothing is retried. */
  | { kind: "gone" }
  /** Its URL breaks today's URL rules: no POST; the endpoint is disabled and the delivery failed, as for 410. */
  | { kind: "url_refused"; reason: string }
  /** Anything else: QStash must come back after `retryAfterSeconds` (null: its retries are spent). */
  | { kind: "retry"; reason: string; retryAfterSeconds: number | null };

interface Leased {
  id: string;
  event_id: string;
  body: string;
  endpoint_id: string;
  url: string;
  secret_box: string;
  previous_secret_box: string | null;
  /** A string or a Date depending on the driver's type parsers; read through `new Date`. */
  previous_secret_expires_at: Date | string | null;
}

/**
 * One attempt of a webhook delivery, as a `webhook.deliver` job. `retried` is
 * QStash's count of earlier deliveries of this job: it picks the next delay
 * from the schedule. The handler never waits or loops: a failed attempt is an
 * answer that makes QStash come back (guarantee 7).
 *
 * `messageId` is the job's QStash message id: only the job that carries the
 * delivery now (the row's `message_id`, or any while none is recorded yet) may
 * attempt it. A redeliver publishes a new job while QStash still holds the old one
 * on its backoff: both chains kept POSTing, 16 attempts for a schedule of 8, and
 * each set the next attempt's time over the other's (a walkthrough). The old job
 * is answered as settled, so QStash ends it.
 */
export async function deliverWebhook(
  deps: DeliverDeps,
  deliveryId: string,
  retried: number,
  messageId?: string,
): Promise<DeliverOutcome> {
  const current =
    messageId === undefined ? sql`true` : sql`(d.message_id IS NULL OR d.message_id = ${messageId})`;
  // A lease an earlier attempt of this same job holds belongs to an attempt that is
  // over: QStash sends a job's next attempt only once the last one failed, timed out
  // or lost its connection (which on Workers cancels the request), so its Worker was
  // killed mid-attempt. Taken over at once: answered 409 until the lease ran out, each
  // answer spent one of the job's retries, and under the dev server's time scale all
  // of them within seconds, failing deliveries a restart had interrupted.
  const overtaken =
    messageId === undefined
      ? sql`false`
      : sql`(d.message_id = ${messageId} AND d.lease_retried < ${retried})`;
  // The lease: of two concurrent deliveries of one job (one attempt sent twice), the
  // row lock lets one UPDATE through and the other re-checks `lease_until` and matches nothing.
  const [leased] = await queryRows<Leased>(
    deps.db,
    sql`UPDATE webhook_deliveries d
           SET lease_until = now() + make_interval(secs => ${LEASE_SECONDS}), lease_retried = ${retried},
               attempts = d.attempts + 1, last_attempt_at = now()
          FROM webhook_endpoints e
         WHERE d.id = ${deliveryId} AND e.id = d.endpoint_id AND e.enabled
           AND e.scope IS NOT DISTINCT FROM d.scope AND d.status = 'pending'
           AND (d.lease_until IS NULL OR d.lease_until <= now() OR ${overtaken}) AND ${current}
     RETURNING d.id, d.event_id, d.body, e.id AS endpoint_id, e.url, e.secret_box,
               e.previous_secret_box, e.previous_secret_expires_at`,
  );
  if (!leased) return whyNotLeased(deps.db, deliveryId, messageId);

  try {
    return await attemptDelivery(deps, leased, retried);
  } catch (error) {
    // Signing or recording failed (a secret box that does not open, the database
    // gone): give the lease back so QStash's retry need not wait it out.
    await deps.db
      .execute(
        sql`UPDATE webhook_deliveries SET lease_until = NULL, last_error = ${withoutNul(`delivery failed: ${(error as Error).message}`)}
             WHERE id = ${leased.id}`,
      )
      .catch(() => undefined);
    throw error;
  }
}

async function attemptDelivery(deps: DeliverDeps, leased: Leased, retried: number): Promise<DeliverOutcome> {
  const verdict = checkWebhookUrl(leased.url, deps.urlPolicy);
  if (!verdict.ok) {
    const reason = `url refused: ${verdict.reason}`;
    await recordDisabled(deps.db, leased, reason, null);
    return { kind: "url_refused", reason };
  }
  const now = new Date();
  const secrets = await signingSecrets(
    deps.secretsKey,
    {
      id: leased.endpoint_id,
      secretBox: leased.secret_box,
      previousSecretBox: leased.previous_secret_box,
      previousSecretExpiresAt:
        leased.previous_secret_expires_at === null ? null : new Date(leased.previous_secret_expires_at),
    },
    now,
  );
  // Signed at the attempt, not at the event: receivers reject stale timestamps.
  const signed = await signHeaders({
    id: leased.event_id,
    timestamp: Math.floor(now.getTime() / 1000),
    body: leased.body,
    secrets,
  });
  const attempt = await post(deps, leased.url, leased.body, { ...signed });

  if (attempt.status !== null && attempt.status >= 200 && attempt.status < 300) {
    await recordDelivered(deps.db, leased, attempt);
    return { kind: "delivered", status: attempt.status };
  }
  if (attempt.status === 410) {
    await recordDisabled(deps.db, leased, "endpoint answered 410 Gone", attempt);
    return { kind: "gone" };
  }
  const reason =
    attempt.status !== null ? `endpoint answered ${attempt.status}` : `no answer: ${attempt.error}`;
  const receiverDelay = parseRetryAfter(attempt.headers["retry-after"] ?? null, new Date());
  const retryAfterSeconds = nextRetryDelaySeconds(deps.schedule, retried, receiverDelay);
  await recordRetry(deps.db, leased, attempt, reason, retryAfterSeconds);
  return { kind: "retry", reason, retryAfterSeconds };
}

interface Attempt {
  /** Where it was POSTed. */
  url: string;
  durationMs: number;
  status: number | null;
  error: AttemptError | null;
  headers: Record<string, string>;
  body: string | null;
}

async function post(
  deps: DeliverDeps,
  url: string,
  body: string,
  signed: Record<string, string>,
): Promise<Attempt> {
  const started = Date.now();
  try {
    const res = await (deps.fetch ?? fetch)(url, {
      method: "POST",
      headers: { ...signed, "content-type": "application/json", "user-agent": "edge-outbox-webhooks" },
      body,
      // A 3xx is the endpoint's answer, not a new destination: following it would
      // let a public URL point the sender at an internal one.
      redirect: "manual",
      signal: AbortSignal.timeout(deps.timeoutMs ?? DELIVERY_TIMEOUT_MS),
    });
    const headers: Record<string, string> = {};
    for (const name of KEPT_HEADERS) {
      const value = res.headers.get(name);
      if (value !== null) headers[name] = value;
    }
    const text = await readPrefix(res, RESPONSE_BODY_BYTES).catch(() => null);
    return { url, durationMs: Date.now() - started, status: res.status, error: null, headers, body: text };
  } catch (error) {
    return {
      url,
      durationMs: Date.now() - started,
      status: null,
      error: classify(error),
      headers: {},
      body: null,
    };
  }
}

/** The first `limit` bytes of a body, without reading the rest of a large one. */
async function readPrefix(res: Response, limit: number): Promise<string | null> {
  if (!res.body) return null;
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.length;
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
  const bytes = new Uint8Array(Math.min(size, limit));
  let at = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.length - at);
    bytes.set(part, at);
    at += part.length;
    if (at >= bytes.length) break;
  }
  // A cut through a multi-byte character becomes U+FFFD: the log is for people. So
  // does a NUL, which Postgres text cannot hold: kept, it failed the attempt's
  // record, and a delivered webhook was sent again and again.
  return withoutNul(new TextDecoder().decode(bytes));
}

/** Text from outside (a receiver's answer, an error naming it) as Postgres text can hold it. */
function withoutNul(text: string): string {
  return text.replaceAll("\u0000", "\uFFFD");
}

/** Sorts a failed fetch into the attempt log's error classes (Node's undici and workerd word them differently). */
export function classify(error: unknown): AttemptError {
  const e = error as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === "TimeoutError" || e?.name === "AbortError") return "timeout";
  const text = `${e?.cause?.code ?? ""} ${e?.cause?.message ?? ""} ${e?.message ?? ""}`;
  if (/ECONNREFUSED|refused/i.test(text)) return "refused";
  if (/ENOTFOUND|EAI_AGAIN|getaddrinfo|dns|resolve/i.test(text)) return "dns";
  if (/timed? ?out|ETIMEDOUT/i.test(text)) return "timeout";
  return "network";
}

/**
 * The attempt-log row every outcome writes first, as a CTE body of its one statement.
 * It is written once the answer is in, so its time is the lease's: the
 * last_attempt_at the delivery was given when this attempt began, read back from the
 * row (the statement's CTEs all see it as the lease left it), not when a 15 s
 * timeout ended. Taken back by the attempt's duration instead, it was a few to tens
 * of milliseconds off the delivery's lastAttemptAt, which a client compares.
 */
function insertAttempt(deliveryId: string, a: Attempt) {
  return sql`INSERT INTO webhook_attempts (delivery_id, attempted_at, url, duration_ms, status, error, response_headers, response_body)
      SELECT id, last_attempt_at, ${a.url}, ${a.durationMs}, ${a.status}, ${a.error}, ${JSON.stringify(a.headers)}::jsonb, ${a.body}
        FROM webhook_deliveries WHERE id = ${deliveryId}`;
}

async function recordDelivered(db: Db, d: Leased, a: Attempt): Promise<void> {
  await db.execute(sql`
    WITH attempt AS (
      ${insertAttempt(d.id, a)}
    ), delivery AS (
      UPDATE webhook_deliveries
         SET status = 'delivered', delivered_at = now(), lease_until = NULL, next_attempt_at = NULL, last_error = NULL
       WHERE id = ${d.id}
    )
    UPDATE webhook_endpoints SET last_success_at = now(), failing_since = NULL WHERE id = ${d.endpoint_id}`);
}

/**
 * The delivery failed for good and its endpoint disabled, with an alert: after a
 * 410 (its attempt logged) or a URL today's rules refuse (no attempt was made).
 */
async function recordDisabled(db: Db, d: Leased, reason: string, a: Attempt | null): Promise<void> {
  await db.execute(sql`
    WITH attempt AS (
      ${a ? insertAttempt(d.id, a) : sql`SELECT 1`}
    ), delivery AS (
      UPDATE webhook_deliveries
         SET status = 'failed', failed_at = now(), lease_until = NULL, next_attempt_at = NULL, last_error = ${reason}
       WHERE id = ${d.id}
    ), disabled AS (
      UPDATE webhook_endpoints
         SET enabled = false, disabled_reason = ${reason}, disabled_at = now(), updated_at = now()
       WHERE id = ${d.endpoint_id} AND enabled
      RETURNING id, url
    )
    INSERT INTO outbox_alerts (kind, event_id, subscription, message, details)
    SELECT 'webhook.endpoint_disabled', ${alertEventIdOf(sql.raw("w"))}, 'webhook.deliver',
           ${disabledAlertMessage(sql.raw("disabled.id"), sql.raw("disabled.url"), reason)},
           jsonb_build_object('endpointId', disabled.id, 'url', disabled.url, 'reason', ${reason}::text,
                              'deliveryId', ${d.id}::uuid)
      FROM disabled, webhook_deliveries w WHERE w.id = ${d.id}`);
}

async function recordRetry(
  db: Db,
  d: Leased,
  a: Attempt,
  reason: string,
  retryAfterSeconds: number | null,
): Promise<void> {
  await db.execute(sql`
    WITH attempt AS (
      ${insertAttempt(d.id, a)}
    ), delivery AS (
      UPDATE webhook_deliveries
         SET lease_until = NULL, last_error = ${reason},
             next_attempt_at = ${retryAfterSeconds === null ? sql`NULL` : sql`now() + make_interval(secs => ${retryAfterSeconds})`}
       WHERE id = ${d.id}
    )
    UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, now()) WHERE id = ${d.endpoint_id}`);
}

/** The lease matched nothing: find out why, and settle a delivery whose endpoint is disabled. */
async function whyNotLeased(db: Db, deliveryId: string, messageId?: string): Promise<DeliverOutcome> {
  const [row] = await queryRows<{
    status: "pending" | "delivered" | "failed";
    lease_seconds: number | null;
    enabled: boolean;
    message_id: string | null;
  }>(
    db,
    sql`SELECT d.status, d.message_id, e.enabled AND e.scope IS NOT DISTINCT FROM d.scope AS enabled,
               ceil(extract(epoch FROM d.lease_until - now()))::int AS lease_seconds
          FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.id = ${deliveryId}`,
  );
  if (!row) return { kind: "settled", status: "missing" };
  if (row.status !== "pending") return { kind: "settled", status: row.status };
  // Replaced by a redeliver's job: that one carries the delivery, this one ends here.
  if (messageId !== undefined && row.message_id !== null && row.message_id !== messageId)
    return { kind: "settled", status: "superseded" };
  if (!row.enabled) {
    await db.execute(sql`
      UPDATE webhook_deliveries d
         SET status = 'failed', failed_at = now(), lease_until = NULL, next_attempt_at = NULL,
             last_error = 'endpoint disabled: ' || coalesce(e.disabled_reason, 'scope changed')
        FROM webhook_endpoints e
       WHERE d.id = ${deliveryId} AND e.id = d.endpoint_id AND d.status = 'pending'`);
    return { kind: "endpoint_disabled" };
  }
  return { kind: "busy", retryAfterSeconds: Math.max(1, row.lease_seconds ?? 1) };
}
