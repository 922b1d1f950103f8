import { z } from "zod";
import { recordJobFailure } from "../../domain/job-failures/record.ts";
import { FAILURE_CALLBACK_PATH } from "../../outbox/index.ts";
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
const JOBS_PREFIX = "/jobs/";

/**
 * `POST /jobs/_failed`: signed by QStash like any delivery (for this URL), and
 * delivered at least once, so recording is idempotent on the message id. Each
 * failure becomes a `job_failures` row and a `job.failed` alert for operators.
 * A signed body we cannot read answers 489: retrying it cannot help.
 */
export function registerJobsFailed(app: App) {
  app.post(FAILURE_CALLBACK_PATH, async (c) => {
    const raw = await verifiedBody(c, `${c.var.config.PUBLIC_URL}${FAILURE_CALLBACK_PATH}`);
    const parsed = failureCallback.safeParse(safeJson(raw));
    if (!parsed.success)
      throw new ApiError("job_rejected", "failure callback body is not QStash's callback shape");
    const f = parsed.data;
    const jobBody = f.sourceBody === undefined ? "" : fromBase64(f.sourceBody);
    const { recorded } = await recordJobFailure(c.var.db, {
      messageId: f.sourceMessageId,
      subscription: subscriptionOf(f.url),
      eventId: eventIdOf(jobBody),
      status: f.status ?? null,
      body: jobBody,
      responseBody: f.body === undefined ? null : fromBase64(f.body).slice(0, 4000),
      dlqId: f.dlqId ?? null,
      retried: f.retried ?? null,
    });
    return c.json({ ok: true, recorded });
  });
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
  return at === -1 ? url : decodeURIComponent(path.slice(at + JOBS_PREFIX.length));
}

function eventIdOf(jobBody: string): string | null {
  const id = (safeJson(jobBody) as { event?: { id?: unknown } } | undefined)?.event?.id;
  return uuid.safeParse(id).success ? (id as string) : null;
}
