import type { ApiKey } from "../domain/api-keys/keys.ts";
import { lastAnswerOf, type JobFailureRow } from "../domain/job-failures/record.ts";
import { retriesDueText } from "../domain/job-failures/retries-due.ts";
import { alertsShownWithEvent, type OperatorStats } from "../domain/job-failures/retry.ts";
import {
  healthLabel,
  laggingText,
  successRateText,
  toldHeaders,
  unrecordedAttempts,
  type EndpointHealth,
  type EventDelivery,
} from "../domain/webhooks/delivery-log.ts";
import { describeWaiting, jobsWaitingText, type JobsWaiting } from "../domain/subscription-backlog.ts";
import { storageText } from "../domain/storage.ts";
import { retentionText } from "../domain/sweep-runs.ts";
import {
  unmatchedTypesText,
  type attemptView,
  type deliveryView,
  type EndpointView,
} from "../domain/webhooks/schemas.ts";
import type { EndpointHealth as EndpointDayHealth } from "../domain/webhooks/get.ts";
import {
  mergedInto,
  mergedText,
  type AlertRow,
  type DrainResult,
  type EventRow,
  type PassResult,
} from "../outbox/index.ts";

const when = (d: Date | null) => (d ? d.toISOString() : "-");

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

export function formatEventTable(events: EventRow[]): string {
  if (events.length === 0) return "no events";
  return table(
    ["SEQ", "ID", "TYPE", "SUBJECT", "STATE", "ATTEMPTS", "CREATED"],
    events.map((e) => [
      String(e.seq),
      e.id,
      e.type,
      e.subject,
      e.state,
      String(e.attempts),
      when(e.createdAt),
    ]),
  );
}

/** Characters of a payload the human form shows: a terminal is not the place for a megabyte. */
export const PAYLOAD_SHOWN = 2000;

function clip(json: string): string {
  if (json.length <= PAYLOAD_SHOWN) return json;
  return `${json.slice(0, PAYLOAD_SHOWN)}… (${json.length} characters in all; --json prints it whole)`;
}

export function formatEvent(
  event: EventRow & {
    alerts: AlertRow[];
    webhookDeliveries: Omit<EventDelivery, "attemptLog">[];
    webhooksNote: string | null;
    jobsWaiting: JobsWaiting[];
    jobFailures: JobFailureRow[];
    countingAlerts: AlertRow[];
  },
): string {
  const lines = [
    `event ${event.id} (seq ${event.seq})`,
    `  type       ${event.type}`,
    `  subject    ${event.subject}${event.scope ? ` (scope ${event.scope})` : ""}`,
    `  state      ${event.state}`,
    `  created    ${when(event.createdAt)}`,
    `  fanned out ${when(event.fannedOutAt)}`,
    // The relay's tries to fan it out (the dashboard's "fan-out attempts"), not a job's or a webhook's.
    `  attempts   ${event.attempts} to fan out${
      event.poisonedAt
        ? `, no further attempts until requeued (events requeue ${event.id})`
        : event.nextAttemptAt
          ? `, next ${when(event.nextAttemptAt)}`
          : ""
    }`,
  ];
  if (event.poisonedAt) lines.push(`  poisoned   ${when(event.poisonedAt)}`);
  // Kept after a requeue that then fanned it out: the dashboard's "earlier fan-out
  // error". Bare, it read as a fanned event that had failed (the alert walkthrough).
  if (event.lastError)
    lines.push(
      `  last error ${event.lastError}${event.state === "fanned" ? " (an earlier try; it was fanned out since)" : ""}`,
    );
  lines.push("  fan-out");
  const entries = Object.entries(event.fanout ?? {});
  if (entries.length === 0)
    lines.push(event.fannedOutAt ? "    (no matching subscription)" : "    (not yet)");
  for (const [sub, entry] of entries) {
    lines.push(
      "coalescedInto" in entry
        ? `    ${sub}: coalesced into ${entry.coalescedInto}`
        : `    ${sub}: ${entry.messageId}${entry.deduplicated ? " (deduplicated)" : ""}`,
    );
    const held = event.jobsWaiting.find((w) => w.subscription === sub);
    if (held) lines.push(`      may still wait in QStash: ${jobsWaitingText(held)}`);
  }
  lines.push(`  payload    ${clip(JSON.stringify(event.payload))}`);
  // Its deliveries, or why it has none (not yet made, or no endpoint takes it).
  if (event.webhooksNote) lines.push(`  webhooks   ${event.webhooksNote}`);
  if (event.webhookDeliveries.length > 0) lines.push("  webhooks");
  for (const d of event.webhookDeliveries)
    lines.push(`    delivery ${d.id}, endpoint ${d.endpointUrl}: ${deliveryState(d)}`);
  // Its own failed jobs: the subscription's one job.failed alert names only the
  // latest event it counts (ADR 0037), so this is where an earlier one's show.
  for (const f of event.jobFailures) {
    const retry = f.retriedAt
      ? `retried ${when(f.retriedAt)} as ${f.retryMessageId ?? "(publish not recorded)"}, ${retryOutcome(f)}`
      : `not retried (job-failures retry ${f.id})`;
    lines.push(
      `  failed job ${f.id} ${f.subscription} ${when(f.receivedAt)}: ${lastAnswerOf(f, 60)}; ${retry}`,
    );
  }
  // Each alert says whether it is still open, as --json's resolvedAt does, and why
  // it is here when the row alone would mislead, as the event's page does.
  for (const { alert: a, why } of alertsShownWithEvent(event, event.countingAlerts)) {
    // A merged alert was closed by an upgrade (migrations 0016, 0023), not by an operator.
    const status = a.resolvedAt ? `resolved ${when(a.resolvedAt)}${mergedText(a)}` : "open";
    lines.push(`  alert      ${a.id} ${when(a.createdAt)} ${a.kind} (${status}): ${a.message}`);
    if (why) lines.push(`             (${why})`);
  }
  return lines.join("\n");
}

/**
 * What a listing's text form ends with when there is an older page (nothing when
 * there is not): the command to see it. Only the text form: --json stays the list.
 */
export function olderHint(nextBefore: number | null): string {
  return nextBefore === null ? "" : `\nolder ones: the same command with --before ${nextBefore}`;
}

export function formatAlerts(alerts: AlertRow[]): string {
  if (alerts.length === 0) return "no alerts";
  return table(
    ["ID", "KIND", "EVENT", "CREATED", "RESOLVED", "MESSAGE"],
    alerts.map((a) => [
      String(a.id),
      a.kind,
      a.eventId ?? "-",
      when(a.createdAt),
      mergedInto(a) === undefined
        ? when(a.resolvedAt)
        : `${when(a.resolvedAt)} (merged into ${mergedInto(a)})`,
      a.message,
    ]),
  );
}

export function formatJobFailures(failures: JobFailureRow[]): string {
  if (failures.length === 0) return "no job failures";
  return table(
    ["ID", "RECEIVED", "SUBSCRIPTION", "EVENT", "LAST ANSWER", "MESSAGE", "RETRIED"],
    failures.map((f) => [
      f.retryOfId === null ? String(f.id) : `${f.id} (retry of ${f.retryOfId})`,
      when(f.receivedAt),
      f.subscription,
      f.eventId ?? "-",
      lastAnswerOf(f, 60),
      f.messageId,
      f.retriedAt
        ? `${when(f.retriedAt)} as ${f.retryMessageId ?? "(publish not recorded)"}, ${retryOutcome(f)}`
        : "-",
    ]),
  );
}

/** As the dashboard says it: the retry's job was delivered, failed for good too, or neither yet. */
function retryOutcome(f: { retryDeliveredAt: Date | null; failedAgainId: number | null }): string {
  const outcomes = [
    ...(f.retryDeliveredAt ? [`delivered ${when(f.retryDeliveredAt)}`] : []),
    ...(f.failedAgainId === null ? [] : [`failed again: ${f.failedAgainId}`]),
  ];
  return outcomes.length > 0 ? outcomes.join(", ") : "not delivered yet";
}

export function formatStats(s: OperatorStats): string {
  const age = s.oldestPendingAgeSeconds === null ? "-" : `${s.oldestPendingAgeSeconds.toFixed(1)} s`;
  // As the dashboard's overview says it: a backoff that has run out is no longer one.
  const backingOff = s.relay.backoffUntil !== null && new Date(s.relay.backoffUntil).getTime() > Date.now();
  const passes = `${s.relay.failures} failed pass${s.relay.failures === 1 ? "" : "es"}`;
  const relay =
    s.relay.failures === 0
      ? "healthy"
      : backingOff
        ? `backing off after ${passes} until ${when(s.relay.backoffUntil)}: ${s.relay.lastError ?? ""}`
        : `failing (${passes} in a row; the next pass may run now): ${s.relay.lastError ?? ""}`;
  return [
    `backlog            ${s.backlog} (${s.due} due now)`,
    `oldest pending     ${age}`,
    `poisoned           ${s.poisoned}${s.poisoned > 0 ? " (events list --state poisoned shows why; events requeue --all sends them again)" : ""}`,
    `open alerts        ${s.openAlerts}`,
    `job failures       ${s.jobFailuresNotRetried} not retried${s.jobFailuresNotRetried > 0 ? " (job-failures retry --all sends them again)" : ""}`,
    `retries due        ${retriesDueLine(s.jobRetriesDue)}`,
    `relay              ${relay}`,
    `waiting in QStash  ${waitingInQStash(s.waitLists)}`,
    `webhooks waiting   ${webhooksWaiting(s.webhookDeliveriesWaiting)}`,
    `cron sweep         ${sweepLine(s.sweep)}`,
    `jobs from QStash   ${s.canary.text}`,
    `database           ${storageText(s.storage)}`,
  ].join("\n");
}

/** Failed jobs waiting for QStash's next try, which no other line counts. */
function retriesDueLine(due: OperatorStats["jobRetriesDue"]): string {
  const text = retriesDueText(due);
  return text === undefined ? "none" : `${text} (QStash retries them; job-failures lists those that run out)`;
}

/** When the cron sweep last finished, with the retention it applied, or why it needs looking at (ADR 0040). */
function sweepLine(sweep: OperatorStats["sweep"]): string {
  return (
    sweep.trouble ??
    `finished ${when(sweep.finishedAt)} in ${sweep.durationMs} ms; ${retentionText(sweep.retentionDays)}`
  );
}

/** Jobs QStash holds behind each subscription's flow-control limit, as the sweep last read them. */
function waitingInQStash(readings: OperatorStats["waitLists"]): string {
  const checked = readings.reduce<Date | undefined>(
    (latest, r) => (latest === undefined || r.checkedAt > latest ? r.checkedAt : latest),
    undefined,
  );
  if (checked === undefined) return "not read yet (the cron sweep reads it each minute)";
  const read = `${describeWaiting(readings) ?? "none"}; read by the sweep at ${when(checked)}`;
  const unread = readings.find((r) => r.unreadSince !== null);
  return unread
    ? `not read since ${when(unread.unreadSince)} (${unread.unreadError ?? "no reason given"}); the last reading: ${read}`
    : read;
}

/** Deliveries not attempted yet, most of them queued in QStash behind their endpoint's limit. */
function webhooksWaiting(w: OperatorStats["webhookDeliveriesWaiting"]): string {
  if (w.deliveries === 0) return "none";
  const deliveries = `${w.deliveries} deliver${w.deliveries === 1 ? "y" : "ies"}`;
  const endpoints = `${w.endpoints} endpoint${w.endpoints === 1 ? "" : "s"}`;
  return `${deliveries} to ${endpoints} not attempted yet, the oldest created ${w.oldestSince ?? "-"} (webhooks list: each endpoint's pending)`;
}

export function formatPass(p: PassResult): string {
  if (p.mode === "backed-off") return `relay is backed off until ${when(p.backedOffUntil)}; nothing claimed`;
  if (p.mode === "empty") return "nothing to claim";
  const head = `${p.mode} pass: claimed ${p.claimed}, fanned ${p.fanned}, failed ${p.failed}, jobs ${p.jobs}`;
  const tail = [
    ...(p.poisoned.length ? [`poisoned: ${p.poisoned.join(", ")}`] : []),
    ...(p.error ? [`pass failed: ${p.error}; backed off until ${when(p.backedOffUntil)}`] : []),
  ];
  return [head, ...tail].join("\n");
}

export function formatDrain(d: DrainResult): string {
  const why = {
    drained: "nothing left to claim",
    budget: "time budget spent",
    backoff: `relay backed off until ${when(d.backedOffUntil)}${d.error === undefined ? "" : `: ${d.error}`}`,
    "max-passes": "pass limit reached",
  }[d.stoppedBecause];
  return `${d.passes} pass${d.passes === 1 ? "" : "es"}: fanned ${d.fanned}, failed ${d.failed}, poisoned ${d.poisoned}, jobs ${d.jobs} (${why})`;
}

/** Where a delivery stands, in a phrase: "pending, 3 attempts, next …: last error". */
function deliveryState(d: {
  status: string;
  attempts: number;
  nextAttemptAt: Date | null;
  deliveredAt: Date | null;
  failedAt: Date | null;
  lastError: string | null;
}): string {
  const tries = `${d.attempts} attempt${d.attempts === 1 ? "" : "s"}`;
  if (d.status === "delivered") return `delivered ${when(d.deliveredAt)} (${tries})`;
  const error = d.lastError ? `: ${d.lastError}` : "";
  if (d.status === "failed") return `failed ${when(d.failedAt)} after ${tries}${error}`;
  const next = d.nextAttemptAt ? `, next attempt not before ${when(d.nextAttemptAt)}` : "";
  return `pending, ${tries}${next}${error}`;
}

export function formatEndpointTable(endpoints: Omit<EndpointHealth, "version">[]): string {
  if (endpoints.length === 0) return "no webhook endpoints";
  return table(
    ["ID", "URL", "SCOPE", "HEALTH", "SUCCESS, 24 H", "PENDING", "FAILED"],
    endpoints.map((e) => [
      e.id,
      e.url,
      e.scope ?? "(unscoped)",
      healthLabel(e),
      successRateText(e),
      String(e.pending),
      String(e.failed),
    ]),
  );
}

export function formatEndpoint(
  shown: {
    endpoint: EndpointView;
    health: EndpointDayHealth;
    deliveries: ReturnType<typeof deliveryView>[];
    more: boolean;
  },
  status: string | undefined,
): string {
  const { endpoint: e, health: h } = shown;
  const label = healthLabel({ ...e, lagging: h.lagging });
  const unmatched = unmatchedTypesText(e.types);
  const lines = [
    `webhook endpoint ${e.id}`,
    `  url          ${e.url}`,
    ...(e.description ? [`  description  ${e.description}`] : []),
    `  scope        ${e.scope ?? "(unscoped)"}`,
    `  types        ${e.types.join(", ")}${unmatched ? ` (${unmatched})` : ""}`,
    `  health       ${
      label === "disabled"
        ? `disabled ${when(e.disabledAt)}: ${e.disabledReason ?? ""}`
        : label === "failing"
          ? `failing since ${when(e.failingSince)}`
          : label === "lagging" && h.lagging
            ? `lagging: ${laggingText(h.lagging)}`
            : label
    }`,
    `  last success ${when(e.lastSuccessAt)}`,
    `  last ${h.windowHours} h    ${h.deliveries.total} deliver${h.deliveries.total === 1 ? "y" : "ies"} (${h.deliveries.delivered} delivered, ` +
      `${h.deliveries.failed} failed, ${h.deliveries.pending} pending); answered 2xx: ` +
      successRateText({ attempts24h: h.attempts.total, succeeded24h: h.attempts.succeeded }),
    ...(e.previousSecretExpiresAt
      ? [`  secret       rotating: the previous secret signs too until ${when(e.previousSecretExpiresAt)}`]
      : []),
    // What sends failed deliveries again, as `stats` names job-failures retry: the
    // delivery_failed alert and this page said what failed, not how to fix it. A
    // failing endpoint's deliveries wait for retries hours apart: the same command
    // sends them once its receiver answers.
    ...(h.deliveries.failed > 0 || shown.deliveries.some((d) => d.status === "failed") || label === "failing"
      ? [
          `  recover      webhooks recover ${e.id} --since <time> sends again now its deliveries that gave up or wait for a retry` +
            (e.enabled ? "" : " (enable it first)"),
        ]
      : []),
    "",
  ];
  const which = status ? `${status} deliveries` : "deliveries";
  if (shown.deliveries.length === 0) return [...lines, `no ${which}`].join("\n");
  lines.push(`${which}, newest first${shown.more ? " (more: raise --limit)" : ""}`);
  lines.push(
    table(
      ["ID", "CREATED", "TYPE", "STATUS"],
      shown.deliveries.map((d) => [d.id, when(d.createdAt), d.eventType, deliveryState(d)]),
    ),
  );
  return lines.join("\n");
}

export function formatDelivery(
  d: Omit<ReturnType<typeof deliveryView>, "attempts"> & {
    endpointUrl: string;
    body: string;
    attemptsMade: number;
    attemptInProgress: boolean;
    attempts: ReturnType<typeof attemptView>[];
  },
): string {
  const lines = [
    `webhook delivery ${d.id}`,
    `  endpoint   ${d.endpointUrl} (${d.endpointId})`,
    `  event      ${d.eventId} (${d.eventType}${d.scope ? `, scope ${d.scope}` : ""})`,
    `  created    ${when(d.createdAt)}`,
    `  status     ${deliveryState({ ...d, attempts: d.attemptsMade })}`,
    "  attempts",
  ];
  if (d.attemptsMade === 0) lines.push("    (none yet)");
  for (const a of d.attempts) {
    const answer = a.status === null ? `no answer (${a.error ?? "unknown"})` : String(a.status);
    const told = toldHeaders(a.responseHeaders);
    const said = (told ? `  (${told})` : "") + (a.responseBody ? `  ${oneLine(a.responseBody, 120)}` : "");
    // Only where it differs: the endpoint's URL was changed since this attempt.
    const to = a.url && a.url !== d.endpointUrl ? `  to ${a.url}` : "";
    lines.push(`    ${when(a.attemptedAt)}  ${answer}  ${a.durationMs} ms${to}${said}`);
  }
  const unrecorded = unrecordedAttempts(d.attemptsMade, d.attempts.length, d.attemptInProgress);
  if (unrecorded) lines.push(`    (${unrecorded})`);
  lines.push(`  body       ${clip(d.body)}`);
  return lines.join("\n");
}

/** A receiver's answer on one terminal line: whitespace folded, cut at `max` characters. */
function oneLine(text: string, max: number): string {
  const folded = text.replace(/\s+/g, " ").trim();
  return folded.length <= max ? folded : `${folded.slice(0, max)}…`;
}

export function formatApiKeys(keys: ApiKey[]): string {
  if (keys.length === 0) return "no API keys";
  return table(
    ["ID", "SCOPE", "NAME", "PREFIX", "CREATED", "LAST USED", "REVOKED"],
    keys.map((k) => [
      k.id,
      k.scope ?? "(none)",
      k.name,
      `${k.prefix}…`,
      when(k.createdAt),
      when(k.lastUsedAt),
      when(k.revokedAt),
    ]),
  );
}
