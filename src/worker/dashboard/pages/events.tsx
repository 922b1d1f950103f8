import type { Hono } from "hono";
import { z } from "zod";
import { blankIsAbsent, SCOPE_MAX } from "../../../domain/text.ts";
import {
  EVENT_STATES,
  TYPE_GLOB_RULE,
  browseEvents,
  isTypeGlob,
  type EventFilter,
  type EventRow,
} from "../../../outbox/index.ts";
import { valid } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";
import { IdLink, Pager, StateBadge, render, Table, time } from "../layout.tsx";

/**
 * A time from the filter form: `<input type="datetime-local">` sends no zone, and
 * the page shows UTC everywhere, so a zone-less value is read as UTC.
 */
const utcTime = z.preprocess(
  blankIsAbsent,
  z
    .string()
    .transform((v) => new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(v) ? v : `${v}Z`))
    .refine((d) => !Number.isNaN(+d), "must be a date and time, e.g. 2026-12-03T08:00")
    .optional(),
);
const text = z.preprocess(blankIsAbsent, z.string().trim().max(200).optional());

export const eventsQuery = z
  .object({
    state: z.preprocess(blankIsAbsent, z.enum(EVENT_STATES).optional()),
    // A glob no event type can match (`Bad Type`) is said, as the API says it, not shown as no events.
    type: z.preprocess(
      blankIsAbsent,
      z.string().trim().max(200).refine(isTypeGlob, TYPE_GLOB_RULE).optional(),
    ),
    subject: text,
    scope: z.preprocess(blankIsAbsent, z.string().trim().max(SCOPE_MAX).optional()),
    // The events written with no scope: a checkbox, since an empty scope field means any scope.
    unscoped: z.preprocess(blankIsAbsent, z.literal("1", { error: "must be 1 when given" }).optional()),
    from: utcTime,
    to: utcTime,
    before: z.preprocess(blankIsAbsent, z.coerce.number().int().positive().optional()),
  })
  .refine((q) => !(q.scope && q.unscoped), {
    path: ["scope"],
    message: "give a scope or tick “without a scope”, not both",
  });

/** The filters as query parameters, to carry them onto the next page's link. */
function filterParams(q: z.output<typeof eventsQuery>, beforeSeq?: number): string {
  const p = new URLSearchParams();
  if (q.state) p.set("state", q.state);
  for (const key of ["type", "subject", "scope", "unscoped"] as const) if (q[key]) p.set(key, q[key]);
  if (q.from) p.set("from", q.from.toISOString());
  if (q.to) p.set("to", q.to.toISOString());
  if (beforeSeq !== undefined) p.set("before", String(beforeSeq));
  return p.toString();
}

const localValue = (d: Date | undefined) => (d ? d.toISOString().slice(0, 16) : "");

/** Subjects longer than this are shown by their end, the whole on hover. */
const SUBJECT_SHOWN = 14;

/**
 * A row's subject, linking to everything that happened to it. A UUID subject took six
 * lines of a 768 px window (broken anywhere), so a row stood 115 px tall; shown by its
 * end as the ids are (IdLink), it takes one.
 */
function SubjectCell({ subject }: { subject: string }) {
  const href = `/dashboard/events?subject=${encodeURIComponent(subject)}`;
  return subject.length > SUBJECT_SHOWN ? (
    <td class="mono nowrap" data-label="subject">
      <IdLink href={href} id={subject} />
    </td>
  ) : (
    <td class="mono" data-label="subject">
      <a href={href}>{subject}</a>
    </td>
  );
}

export function EventTable({ events }: { events: EventRow[] }) {
  return (
    <Table stack>
      <tr>
        <th class="num">seq</th>
        <th>recorded</th>
        <th>type</th>
        <th>subject</th>
        <th>scope</th>
        <th>state</th>
        <th class="num">attempts</th>
        <th>last error</th>
      </tr>
      {events.map((e) => (
        <tr>
          <td class="num mono" data-label="seq">
            <a href={`/dashboard/events/${e.id}`}>{String(e.seq)}</a>
          </td>
          <td class="time" data-label="recorded">
            {time(e.createdAt)}
          </td>
          <td data-label="type">
            <a href={`/dashboard/events/${e.id}`}>{e.type}</a>
          </td>
          <SubjectCell subject={e.subject} />
          <td data-label="scope">{e.scope ?? "–"}</td>
          <td data-label="state">
            <StateBadge state={e.state} />
          </td>
          <td class="num" data-label="attempts">
            {String(e.attempts)}
          </td>
          {/* A fanned row's error is history (it was requeued or retried since): not shown as current. */}
          <td class="error" data-label="last error">
            {e.lastError && e.state !== "fanned" ? e.lastError.slice(0, 160) : ""}
          </td>
        </tr>
      ))}
    </Table>
  );
}

export function registerEvents(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/events", valid("query", eventsQuery), async (c) => {
    const q = c.req.valid("query");
    const filter: EventFilter = {
      state: q.state,
      type: q.type,
      subject: q.subject,
      scope: q.unscoped ? null : q.scope,
      from: q.from,
      to: q.to,
    };
    const page = await browseEvents(c.var.pool, { ...filter, beforeSeq: q.before, limit: 50 });
    return render(
      c,
      { title: "Events", section: "events" },
      <>
        <h1>Events</h1>
        <form class="filters" method="get" action="/dashboard/events">
          <label>
            state
            <select name="state">
              <option value="">any</option>
              {EVENT_STATES.map((s) => (
                <option value={s} selected={q.state === s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
          <label>
            type (glob)
            <input name="type" value={q.type ?? ""} placeholder="supplier.*" />
          </label>
          <label>
            subject
            <input name="subject" value={q.subject ?? ""} />
          </label>
          <label>
            scope
            <input name="scope" value={q.scope ?? ""} />
          </label>
          <label class="check">
            <span>
              <input type="checkbox" name="unscoped" value="1" checked={q.unscoped === "1"} /> without a scope
            </span>
          </label>
          <label>
            from (UTC)
            <input type="datetime-local" name="from" value={localValue(q.from)} />
          </label>
          <label>
            to (UTC)
            <input type="datetime-local" name="to" value={localValue(q.to)} />
          </label>
          <button class="btn" type="submit">
            Filter
          </button>
          <a href="/dashboard/events">clear</a>
        </form>
        {page.events.length === 0 ? (
          <p class="muted">No events match.</p>
        ) : (
          <EventTable events={page.events} />
        )}
        <Pager
          newest={q.before !== undefined ? `/dashboard/events?${filterParams(q)}` : undefined}
          older={
            page.nextBeforeSeq !== null
              ? `/dashboard/events?${filterParams(q, page.nextBeforeSeq)}`
              : undefined
          }
        />
      </>,
    );
  });
}
