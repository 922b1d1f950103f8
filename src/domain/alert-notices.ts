import { sql } from "drizzle-orm";
import { withCause } from "../outbox/index.ts";
import type { Db } from "./db.ts";
import { queryRows } from "./webhooks/rows.ts";

/** Alerts one notice lists one by one; the rest are counted ("and 12 more"). */
export const ALERTS_LISTED_PER_NOTICE = 20;

/** Alerts one sweep claims for its notice, at most; a longer backlog goes over the next sweeps. */
export const ALERTS_PER_NOTICE = 1000;

/**
 * How long the receiver may take to answer before the notice counts as not sent, and
 * is sent again at the next sweep: a chat under load can take seconds, and one that
 * shows a notice but answers later shows it twice (a walkthrough's 8 s receiver did).
 */
export const ALERT_NOTICE_TIMEOUT_MS = 10_000;

/**
 * Minutes a sweep's claim on alerts holds: past it, a claim with no answer recorded
 * (the run was cut off or the deploy replaced it between its claim and the answer)
 * is taken again, so no alert is lost to a run that died (a walkthrough lost 28).
 */
export const ALERT_NOTICE_LEASE_MINUTES = 2;

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
 * watching the dashboard. The alerts are claimed first (`notice_claimed_at`, a lease
 * of ALERT_NOTICE_LEASE_MINUTES taken with SKIP LOCKED: two sweeps at once do not both
 * post one), then posted, then marked told (`notified_at`) once the receiver answers
 * 2xx. A receiver that fails, answers other than 2xx or takes longer than
 * ALERT_NOTICE_TIMEOUT_MS gets them again at the next sweep, and a run that dies
 * between its claim and the answer leaves a lease that runs out: an alert is told of
 * at least once while it is open (twice when a receiver shows it and answers late). An
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
    sql`UPDATE outbox_alerts SET notice_claimed_at = now()
         WHERE id IN (SELECT id FROM outbox_alerts
                       WHERE notified_at IS NULL AND resolved_at IS NULL
                         AND (notice_claimed_at IS NULL
                              OR notice_claimed_at < now() - make_interval(mins => ${ALERT_NOTICE_LEASE_MINUTES}))
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
      message: withoutQueries(a.message),
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
  const ids = `{${alerts.map((a) => a.id).join(",")}}`;
  if (error === undefined) {
    await db.execute(sql`UPDATE outbox_alerts SET notified_at = now() WHERE id = ANY(${ids}::bigint[])`);
    return { sent: alerts.length };
  }
  // Free at once for the next sweep; should this fail too, the lease runs out.
  await db.execute(sql`UPDATE outbox_alerts SET notice_claimed_at = NULL WHERE id = ANY(${ids}::bigint[])`);
  return { sent: 0, error };
}

/**
 * The notice for `alerts` (oldest first). The headline counts them by kind, and the
 * lines take the kinds in turn, so one outage's twenty alerts of a kind cannot hide
 * the one alert of another behind "… and N more" (a walkthrough's job.failed was).
 */
export function alertNotice(alerts: NoticedAlert[], label: string, publicUrl: string): AlertNotice {
  const dashboard = `${publicUrl.replace(/\/+$/, "")}/dashboard/alerts`;
  const byKind = new Map<string, NoticedAlert[]>();
  for (const a of alerts) byKind.set(a.kind, [...(byKind.get(a.kind) ?? []), a]);
  const counts = (kinds: Map<string, number>) => [...kinds].map(([kind, n]) => `${n} ${kind}`).join(", ");
  const listed: NoticedAlert[] = [];
  for (let round = 0; listed.length < Math.min(ALERTS_LISTED_PER_NOTICE, alerts.length); round++)
    for (const group of byKind.values()) {
      const a = group[round];
      if (a && listed.length < ALERTS_LISTED_PER_NOTICE) listed.push(a);
    }
  const unlisted = new Map<string, number>();
  for (const a of alerts) if (!listed.includes(a)) unlisted.set(a.kind, (unlisted.get(a.kind) ?? 0) + 1);
  // The default label already starts with the product's name (edge-outbox-<host>).
  const who = label.startsWith("edge-outbox") ? label : `edge-outbox ${label}`;
  const n = alerts.length;
  const perKind = new Map([...byKind].map(([kind, group]) => [kind, group.length]));
  const headline = `${who}: ${n} new alert${n === 1 ? "" : "s"}${byKind.size > 1 ? ` (${counts(perKind)})` : ""}`;
  const text = [
    headline,
    ...listed.map((a) => `- ${a.kind}: ${clip(a.message, 400)}`),
    ...(unlisted.size > 0 ? [`… and ${n - listed.length} more (${counts(unlisted)})`] : []),
    dashboard,
  ]
    .map(escapeChat)
    .join("\n");
  return { text, deployment: label, dashboard, alerts };
}

/**
 * A URL's query taken out of an alert's words: the message was written for the
 * admin-only dashboard, and a notice goes to a chat's provider and every member of
 * the channel; a tenant's endpoint URL can carry its token there (`?token=…`), as
 * the API already treats `user:password@` as a credential.
 */
export function withoutQueries(text: string): string {
  return text.replace(/(https?:\/\/[^\s?#()]+)\?[^\s#()]*/g, "$1?…");
}

/**
 * `&`, `<` and `>` as Slack's and Mattermost's message formats want them escaped, so
 * words copied from a receiver or an event (`<!channel>`, `<url|label>`) are shown,
 * not turned into a mention or a link.
 */
function escapeChat(line: string): string {
  return line.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

function clip(text: string, max: number): string {
  const one = text.replace(/\s+/g, " ");
  return one.length <= max ? one : `${one.slice(0, max - 1)}…`;
}
