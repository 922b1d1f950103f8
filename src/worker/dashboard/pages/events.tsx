import type { Hono } from "hono";
import { z } from "zod";
import { blankIsAbsent, SCOPE_MAX } from "../../../domain/text.ts";
import {
  EVENT_STATES,
  PAGE_PAYLOAD_BYTES,
  TYPE_GLOB_RULE,
  browseEvents,
  isTypeGlob,
  type EventFilter,
  type EventRow,
} from "../../../outbox/index.ts";
import { validOrIssues } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";
import { focusedOnLoad, IdLink, Pager, StateBadge, render, Table, time } from "../layout.tsx";

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
  })
  // A range given backwards listed "No events match." as if there were none (the
  // dashboard walkthrough): said as what it is.
  .refine((q) => !(q.from && q.to && q.from > q.to), {
    path: ["to"],
    message: "is before “from”: no event can be in that range (swap them)",
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

/** What the filter form sends, as typed: shown again when the page refuses it. */
type FilterValues = Partial<
  Record<"state" | "type" | "subject" | "scope" | "unscoped" | "from" | "to", string>
>;

/** Each field's label on the form: a refusal names the field as the operator sees it. */
const FIELD_LABELS: Record<string, string> = {
  state: "state",
  type: "type (glob)",
  subject: "subject",
  scope: "scope",
  unscoped: "without a scope",
  from: "from (UTC)",
  to: "to (UTC)",
  before: "page",
};

/**
 * The filters. A refused field is marked invalid and described by the refusal
 * (`describedBy`), so a screen reader says why with the field.
 */
function FilterForm({
  v,
  invalid,
  describedBy,
}: {
  v: FilterValues;
  invalid: Set<string>;
  describedBy?: string;
}) {
  const mark = (field: string) =>
    invalid.has(field) ? { "aria-invalid": "true", "aria-describedby": describedBy } : {};
  return (
    <form class="filters" method="get" action="/dashboard/events">
      <label>
        state
        <select name="state" {...mark("state")}>
          <option value="">any</option>
          {EVENT_STATES.map((s) => (
            <option value={s} selected={v.state === s}>
              {s}
            </option>
          ))}
        </select>
      </label>
      <label>
        type (glob)
        <input name="type" value={v.type ?? ""} placeholder="supplier.*" {...mark("type")} />
      </label>
      <label>
        subject
        <input name="subject" value={v.subject ?? ""} {...mark("subject")} />
      </label>
      <label>
        scope
        <input name="scope" value={v.scope ?? ""} {...mark("scope")} />
      </label>
      <label class="check">
        <span>
          <input
            type="checkbox"
            name="unscoped"
            value="1"
            checked={v.unscoped === "1"}
            {...mark("unscoped")}
          />{" "}
          without a scope
        </span>
      </label>
      <label>
        from (UTC)
        <input type="datetime-local" name="from" value={v.from ?? ""} {...mark("from")} />
      </label>
      <label>
        to (UTC)
        <input type="datetime-local" name="to" value={v.to ?? ""} {...mark("to")} />
      </label>
      <button class="btn" type="submit">
        Filter
      </button>
      <a href="/dashboard/events">clear</a>
    </form>
  );
}

export function registerEvents(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/events", validOrIssues("query", eventsQuery), async (c) => {
    const checked = c.req.valid("query");
    if (!checked.ok) {
      // The form again with what was typed and why it was refused, not a page whose
      // one link led away from it (a walkthrough lost the filter it had typed).
      const { issues } = checked;
      // A parameter given twice arrives as an array (refused as one): its last value is shown.
      const typed = Object.fromEntries(
        Object.entries(checked.input).map(([k, v]) => [k, Array.isArray(v) ? v.at(-1) : v]),
      ) as FilterValues;
      return render(
        c,
        { title: "Events: filter refused", section: "events" },
        <>
          <h1>Events</h1>
          <div class="alert-box" role="alert" {...focusedOnLoad()}>
            <p>Nothing was listed: this filter cannot be used.</p>
            <ul>
              {issues.map((i) => (
                <li>{`${FIELD_LABELS[i.path] ?? i.path}: ${i.message}`}</li>
              ))}
            </ul>
          </div>
          <FilterForm v={typed} invalid={new Set(issues.map((i) => i.path))} describedBy="notice" />
        </>,
        400,
      );
    }
    const q = checked.data;
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
        <FilterForm v={{ ...q, from: localValue(q.from), to: localValue(q.to) }} invalid={new Set()} />
        {page.events.length === 0 ? (
          <p class="muted">No events match.</p>
        ) : (
          <EventTable events={page.events} />
        )}
        {page.cutByBytes ? (
          // Seven rows of a page of 50 read as nearly no events (the dashboard walkthrough).
          <p class="muted">
            {`${page.events.length} event${page.events.length === 1 ? "" : "s"} on this page: their payloads fill the ` +
              `${PAGE_PAYLOAD_BYTES / 1_000_000} MB a page holds. Older ones are on the next.`}
          </p>
        ) : null}
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
