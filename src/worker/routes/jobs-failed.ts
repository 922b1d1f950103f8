import { z } from "zod";
import { recordJobFailure } from "../../domain/job-failures/record.ts";
import { DELIVER_JOB } from "../../domain/webhooks/deliver-queue.ts";
import { markDeliveryFailed } from "../../domain/webhooks/delivery-failed.ts";
import { FAILURE_CALLBACK_PATH, failureCallbackUrl, JOBS_PATH } from "../../outbox/index.ts";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";
import { verifiedBody } from "../signature.ts";

// The failure callback QStash sends once a job has exhausted its retries
// (QStash callbacks docs). `body` and `sourceBody` are base64.
const failureCallback = z.looseObject({
  status: z.number().int().optional(),
  body: z.string().optional(),
  retried: z.number().int().optional(),
  dlqId: z.string().optional(),
  sourceMessageId: z.string().min(1),
  url: z.string(),
  sourceBody: z.string().optional(),
});

const uuid = z.guid();
const JOBS_PREFIX = `${JOBS_PATH}/`;

/**
 * `POST /jobs/_failed`: signed by QStash like any delivery (for this URL), and
 * delivered at least once, so recording is idempotent on the message id. Each
 * failure becomes a `job_failures` row and a `job.failed` alert for operators.
 * A signed body we cannot read answers 489: retrying it cannot help.
 */
export function registerJobsFailed(app: App) {
  app.post(FAILURE_CALLBACK_PATH, async (c) => {
    const raw = await verifiedBody(c, failureCallbackUrl(c.var.config.PUBLIC_URL));
    const parsed = failureCallback.safeParse(safeJson(raw));
    if (!parsed.success)
      throw new ApiError("job_rejected", "failure callback body is not QStash's callback shape");
    const f = parsed.data;
    const jobBody = f.sourceBody === undefined ? "" : fromBase64(f.sourceBody);
    // A webhook delivery that ran out of retries is failed on its own row, with its own alert.
    const deliveryId = subscriptionOf(f.url) === DELIVER_JOB ? deliveryIdOf(jobBody) : null;
    if (deliveryId) {
      const { failed } = await markDeliveryFailed(c.var.db, {
        deliveryId,
        messageId: f.sourceMessageId,
        status: f.status ?? null,
        retried: f.retried ?? null,
        dlqId: f.dlqId ?? null,
      });
      return c.json({ ok: true, recorded: failed });
    }
    const { recorded } = await recordJobFailure(c.var.db, {
      messageId: clean(f.sourceMessageId),
      subscription: clean(subscriptionOf(f.url)),
      eventId: eventIdOf(jobBody),
      status: within(f.status, 0, 999),
      body: clean(jobBody),
      responseBody: f.body === undefined ? null : clean(fromBase64(f.body).slice(0, 4000)),
      dlqId: f.dlqId === undefined ? null : clean(f.dlqId),
      retried: within(f.retried, 0, 2 ** 31 - 1),
    });
    return c.json({ ok: true, recorded });
  });
}

// The record is for people, and QStash retries any 5xx: a value Postgres cannot
// store (NUL in text, an integer past int4) is cleaned rather than failing the
// callback. NUL becomes U+FFFD, as undecodable bytes already do.
function clean(text: string): string {
  return text.replaceAll("\u0000", "\uFFFD");
}

function within(n: number | undefined, min: number, max: number): number | null {
  return n !== undefined && n >= min && n <= max ? n : null;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

// Invalid UTF-8 is kept readable (U+FFFD) rather than rejected: the record is for people.
function fromBase64(value: string): string {
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(value), (ch) => ch.charCodeAt(0)));
  } catch {
    return value;
  }
}

/** `https://x/jobs/notify.mail` → `notify.mail`; the whole URL when it is not one of ours. */
function subscriptionOf(url: string): string {
  const path = URL.canParse(url) ? new URL(url).pathname : url;
  const at = path.lastIndexOf(JOBS_PREFIX);
  if (at === -1) return url;
  const name = path.slice(at + JOBS_PREFIX.length);
  try {
    return decodeURIComponent(name);
  } catch {
    // A malformed escape (`%E0%A4%A`): keep the name as it came.
    return name;
  }
}

function eventIdOf(jobBody: string): string | null {
  const id = (safeJson(jobBody) as { event?: { id?: unknown } } | undefined)?.event?.id;
  return uuid.safeParse(id).success ? (id as string) : null;
}

function deliveryIdOf(jobBody: string): string | null {
  const id = (safeJson(jobBody) as { deliveryId?: unknown } | undefined)?.deliveryId;
  return uuid.safeParse(id).success ? (id as string) : null;
}
