import { sql } from "drizzle-orm";
import { withCause } from "../outbox/index.ts";
import type { Db } from "./db.ts";
import { queryRows } from "./webhooks/rows.ts";

/** Alerts one notice lists one by one; the rest are counted ("and 12 more"). */
export const ALERTS_LISTED_PER_NOTICE = 20;

/** Alerts one sweep claims for its notice, at most; a longer backlog goes over the next sweeps. */
export const ALERTS_PER_NOTICE = 1000;

/** How long the receiver may take to answer before the notice counts as not sent. */
export const ALERT_NOTICE_TIMEOUT_MS = 5_000;

/** One alert as a notice carries it. */
export interface NoticedAlert {
  id: number;
  kind: string;
  subscription: string | null;
  eventId: string | null;
  message: string;
  createdAt: string;
}

/**
 * What the sweep posts to ALERT_WEBHOOK_URL: `text` for a person (an incoming chat
 * webhook shows it as it is), the rest for a program.
 */
export interface AlertNotice {
  text: string;
  /** The deployment's label (ADR 0027), to tell deployments apart in one channel. */
  deployment: string;
  /** Where an operator sees them: the dashboard's alerts page. */
  dashboard: string;
  /** Every alert the notice is about, oldest first (`text` lists the first ALERTS_LISTED_PER_NOTICE). */
  alerts: NoticedAlert[];
}

export interface AlertNoticeResult {
  /** Alerts the notice told of (0 when there were none, or it was not sent). */
  sent: number;
  /** Why the notice was not sent: its alerts wait for the next sweep. */
  error?: string;
}

/**
 * The cron sweep's last step when ALERT_WEBHOOK_URL is set (ADR 0046): every open
 * alert not told of yet, in one POST, so an operator hears of an alert without
 * watching the dashboard. The alerts are claimed first (`notified_at`, SKIP LOCKED:
 * two sweeps at once tell of each alert once), then posted; a receiver that fails,
 * answers other than 2xx or takes longer than ALERT_NOTICE_TIMEOUT_MS puts them back
 * for the next sweep, so an alert is told of at least once while it is open. An
 * alert resolved before a sweep saw it is not told of; one raised again later is a
 * new alert, and is. A folded alert counting more failures (job.failed, a poisoned
 * type's) is told of once, when it opens.
 */
export async function sendAlertNotice(
  db: Db,
  options: {
    url: string;
    label: string;
    publicUrl: string;
    fetch?: typeof fetch;
    timeoutMs?: number;
  },
): Promise<AlertNoticeResult> {
  const claimed = await queryRows<{
    id: number;
    kind: string;
    subscription: string | null;
    event_id: string | null;
    message: string;
    created_at: Date | string;
  }>(
    db,
    sql`UPDATE outbox_alerts SET notified_at = now()
         WHERE id IN (SELECT id FROM outbox_alerts
                       WHERE notified_at IS NULL AND resolved_at IS NULL
                       ORDER BY id LIMIT ${ALERTS_PER_NOTICE}
                       FOR UPDATE SKIP LOCKED)
        RETURNING id, kind, subscription, event_id, message, created_at`,
  );
  if (claimed.length === 0) return { sent: 0 };
  const alerts = claimed
    .map((a) => ({
      id: Number(a.id),
      kind: a.kind,
      subscription: a.subscription,
      eventId: a.event_id,
      message: a.message,
      createdAt: new Date(a.created_at).toISOString(),
    }))
    .sort((a, b) => a.id - b.id);
  const notice = alertNotice(alerts, options.label, options.publicUrl);
  const post = options.fetch ?? fetch;
  let error: string | undefined;
  try {
    const res = await post(options.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(notice),
      signal: AbortSignal.timeout(options.timeoutMs ?? ALERT_NOTICE_TIMEOUT_MS),
    });
    // The body is not read: a receiver's answer says nothing more to us than its status.
    await res.body?.cancel();
    if (!res.ok) error = `ALERT_WEBHOOK_URL answered ${res.status}`;
  } catch (e) {
    error = `ALERT_WEBHOOK_URL not reached: ${withCause(e)}`;
  }
  if (error === undefined) return { sent: alerts.length };
  await db.execute(sql`UPDATE outbox_alerts SET notified_at = NULL
                        WHERE id = ANY(${`{${alerts.map((a) => a.id).join(",")}}`}::bigint[])`);
  return { sent: 0, error };
}

/** The notice for `alerts` (oldest first): a line per alert in `text`, up to ALERTS_LISTED_PER_NOTICE. */
export function alertNotice(alerts: NoticedAlert[], label: string, publicUrl: string): AlertNotice {
  const dashboard = `${publicUrl.replace(/\/+$/, "")}/dashboard/alerts`;
  const listed = alerts.slice(0, ALERTS_LISTED_PER_NOTICE).map((a) => `- ${a.kind}: ${clip(a.message, 300)}`);
  const more = alerts.length - listed.length;
  // The default label already starts with the product's name (edge-outbox-<host>).
  const who = label.startsWith("edge-outbox") ? label : `edge-outbox ${label}`;
  const text = [
    `${who}: ${alerts.length} new alert${alerts.length === 1 ? "" : "s"}`,
    ...listed,
    ...(more > 0 ? [`… and ${more} more`] : []),
    dashboard,
  ].join("\n");
  return { text, deployment: label, dashboard, alerts };
}

function clip(text: string, max: number): string {
  const one = text.replace(/\s+/g, " ");
  return one.length <= max ? one : `${one.slice(0, max - 1)}…`;
}
