import type { listJobFailures } from "../domain/job-failures/record.ts";
import type { AlertRow, DrainResult, EventRow, PassResult, Stats } from "../outbox/index.ts";

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

export function formatEvent(event: EventRow & { alerts: AlertRow[] }): string {
  const lines = [
    `event ${event.id} (seq ${event.seq})`,
    `  type       ${event.type}`,
    `  subject    ${event.subject}${event.scope ? ` (scope ${event.scope})` : ""}`,
    `  state      ${event.state}`,
    `  created    ${when(event.createdAt)}`,
    `  fanned out ${when(event.fannedOutAt)}`,
    `  attempts   ${event.attempts}${
      event.poisonedAt
        ? ", no further attempts until requeued"
        : event.nextAttemptAt
          ? `, next ${when(event.nextAttemptAt)}`
          : ""
    }`,
  ];
  if (event.poisonedAt) lines.push(`  poisoned   ${when(event.poisonedAt)}`);
  if (event.lastError) lines.push(`  last error ${event.lastError}`);
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
  }
  lines.push(`  payload    ${clip(JSON.stringify(event.payload))}`);
  // Each alert says whether it is still open, as --json's resolvedAt does.
  for (const a of event.alerts) {
    const status = a.resolvedAt ? `resolved ${when(a.resolvedAt)}` : "open";
    lines.push(`  alert      ${when(a.createdAt)} ${a.kind} (${status}): ${a.message}`);
  }
  return lines.join("\n");
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
      when(a.resolvedAt),
      a.message,
    ]),
  );
}

export function formatJobFailures(failures: Awaited<ReturnType<typeof listJobFailures>>): string {
  if (failures.length === 0) return "no job failures";
  return table(
    ["ID", "RECEIVED", "SUBSCRIPTION", "EVENT", "STATUS", "MESSAGE", "RETRIED"],
    failures.map((f) => [
      f.retryOfId === null ? String(f.id) : `${f.id} (retry of ${f.retryOfId})`,
      when(f.receivedAt),
      f.subscription,
      f.eventId ?? "-",
      f.status === null ? "-" : String(f.status),
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

export function formatStats(s: Stats): string {
  const age = s.oldestPendingAgeSeconds === null ? "-" : `${s.oldestPendingAgeSeconds.toFixed(1)} s`;
  // As the dashboard's overview says it: a backoff that has run out is no longer one.
  const backingOff = s.relay.backoffUntil !== null && new Date(s.relay.backoffUntil).getTime() > Date.now();
  const relay =
    s.relay.failures === 0
      ? "healthy"
      : backingOff
        ? `backing off after ${s.relay.failures} failed passes until ${when(s.relay.backoffUntil)}: ${s.relay.lastError ?? ""}`
        : `failing (${s.relay.failures} failed passes in a row; the next pass may run now): ${s.relay.lastError ?? ""}`;
  return [
    `backlog            ${s.backlog} (${s.due} due now)`,
    `oldest pending     ${age}`,
    `poisoned           ${s.poisoned}`,
    `open alerts        ${s.openAlerts}`,
    `relay              ${relay}`,
  ].join("\n");
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
    backoff: `relay backed off until ${when(d.backedOffUntil)}`,
    "max-passes": "pass limit reached",
  }[d.stoppedBecause];
  return `${d.passes} passes: fanned ${d.fanned}, failed ${d.failed}, poisoned ${d.poisoned}, jobs ${d.jobs} (${why})`;
}
