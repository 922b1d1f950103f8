import type { Hono } from "hono";
import { z } from "zod";
import {
  browseEvents,
  countPoisoned,
  poisonedGroups,
  poisonedIdsWithFingerprint,
  requeue,
  requeuePoisonedInRounds,
  REQUEUE_POISONED_BATCH,
  type PoisonedGroup,
} from "../../../outbox/index.ts";
import { kickRelay } from "../../relay.ts";
import { valid } from "../../validate.ts";
import type { DashboardEnv } from "../env.ts";
import {
  Confirm,
  focusedOnLoad,
  isReload,
  Notice,
  reloadUrl,
  render,
  Table,
  time,
  Unseen,
} from "../layout.tsx";
import { EventTable } from "./events.tsx";

/** Rows listed (with a checkbox each) under a group; "requeue whole group" covers the rest. */
const ROWS_SHOWN_PER_GROUP = 20;
/** Requeued rows followed on the next page; a larger requeue is summarised by its count. */
const TRACKED = 50;

const manyIds = z
  .union([z.guid(), z.array(z.guid())])
  .optional()
  .transform((v) => (v === undefined ? [] : Array.isArray(v) ? v : [v]));

export const requeueForm = z.object({
  id: manyIds,
  /** Present when the "requeue whole group" button was the one pressed. */
  fingerprint: z.string().max(400).optional(),
  back: z.literal("event").optional(),
});

/**
 * Statements of REQUEUE_POISONED_BATCH one "Requeue all" press runs: 10,000 events,
 * 0.12–0.14 s of database time on local Postgres 15 behind 100,000 rows of history,
 * plus ten round trips; the page says when more remain.
 */
const ALL_ROUNDS_PER_PRESS = 10;

const requeueAllForm = z.object({
  // When the page was shown (the database's clock): one poisoned since is not put back unseen.
  upTo: z.iso.datetime({ offset: true }),
});

const poisonedQuery = z.object({
  requeued: z.coerce.number().int().min(0).optional(),
  /** After "Requeue all": events poisoned up to then are still left (the press's cap). */
  more: z.literal("1").optional(),
  track: z
    .string()
    .optional()
    .transform((v) => (v ? v.split(",") : []))
    .pipe(z.array(z.guid()).max(TRACKED)),
  nothing: z.literal("1").optional(),
  /** This page's own reload (layout.tsx, reloadUrl). */
  reloaded: z.literal("1").optional(),
});

/**
 * `n`: the group's place on the page. Every group has the same two controls; their
 * names carry the group's number, unseen, so a screen reader's list of buttons tells
 * them apart (its heading, the normalised error, reads its placeholders aloud).
 */
function Group({ group, n }: { group: PoisonedGroup; n: number }) {
  const shown = group.ids.slice(0, ROWS_SHOWN_PER_GROUP);
  const ofGroup = <Unseen>{` of group ${n} (${group.count} event${group.count === 1 ? "" : "s"})`}</Unseen>;
  return (
    <form class="group" method="post" action="/dashboard/poisoned/requeue">
      <h2>{group.fingerprint}</h2>
      <div class="meta">
        {`${group.count} event${group.count === 1 ? "" : "s"} · first ${time(group.firstSeen)} · last ${time(group.lastSeen)} · types ${group.types.join(", ")}`}
      </div>
      <p>
        {"Example: "}
        <a href={`/dashboard/events/${group.example.id}`}>{group.example.type}</a>
        {` (subject ${group.example.subject})`}
      </p>
      <p class="error">{group.example.lastError ?? ""}</p>
      <div class="actions">
        <Confirm
          label={`Requeue whole group (${group.count})`}
          says={`Puts all ${group.count} event${group.count === 1 ? "" : "s"} of this group back in the queue: each is fanned out again to every subscription.`}
        >
          <button class="btn" type="submit" name="fingerprint" value={group.fingerprint}>
            {`Yes, requeue ${group.count}`}
          </button>
        </Confirm>
        <label hidden data-select-all>
          <input type="checkbox" />
          select all shown
          {ofGroup}
        </label>
      </div>
      <Table stack>
        <tr>
          <th class="pick">
            <Unseen>select</Unseen>
          </th>
          <th>event</th>
        </tr>
        {shown.map((id) => (
          <tr>
            <td class="pick" data-label="select">
              <input type="checkbox" name="id" value={id} aria-label={`select ${id}`} />
            </td>
            <td class="mono" data-label="event">
              <a href={`/dashboard/events/${id}`}>{id}</a>
            </td>
          </tr>
        ))}
      </Table>
      {group.count > shown.length ? (
        <p class="muted">{`and ${group.count - shown.length} more in this group`}</p>
      ) : null}
      {/* After the boxes it sends, so the keyboard reaches it having ticked them. */}
      <div class="actions">
        <button class="btn secondary" type="submit">
          Requeue selected
          {ofGroup}
        </button>
      </div>
    </form>
  );
}

/**
 * How the requeued rows the page shows stand. Once none is pending it said "All 1
 * shown have left the queue" of a row poisoned again by the same cause, which read as
 * the fix having worked (the dashboard walkthrough): poisoned again is said first.
 */
function trackedText(shown: number, pending: number, poisonedAgain: number): string {
  const of = (n: number) =>
    n === shown ? (shown === 1 ? "The one" : `All ${shown}`) : `${n} of the ${shown}`;
  const are = (n: number) => (n === 1 ? "is" : "are");
  const was = (n: number) => (n === 1 ? "was" : "were");
  if (pending > 0)
    return `${of(pending)} shown ${are(pending)} waiting for the relay; this page shows them once they are fanned out.`;
  if (poisonedAgain > 0)
    return (
      `${of(poisonedAgain)} shown ${was(poisonedAgain)} poisoned again: what poisoned ` +
      `${poisonedAgain === 1 ? "it" : "them"} is still there (the table says what).` +
      (poisonedAgain < shown ? ` ${shown - poisonedAgain} fanned out.` : "")
    );
  return `${of(shown)} shown ${was(shown)} fanned out.`;
}

export function registerPoisoned(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/poisoned", valid("query", poisonedQuery), async (c) => {
    const q = c.req.valid("query");
    const [{ groups, scanned, truncated }, all, tracked] = await Promise.all([
      poisonedGroups(c.var.pool),
      countPoisoned(c.var.pool),
      q.track.length > 0
        ? browseEvents(c.var.pool, { ids: q.track, limit: TRACKED }).then((p) => p.events)
        : Promise.resolve([]),
    ]);
    const stillPending = tracked.filter((e) => e.state === "pending").length;
    const poisonedAgain = tracked.filter((e) => e.state === "poisoned").length;
    return render(
      c,
      // While requeued rows are on their way, reload to show them fan out.
      {
        title: "Poisoned",
        section: "poisoned",
        refresh:
          stillPending > 0
            ? { seconds: 2, url: reloadUrl(c), stop: "/dashboard/poisoned", watch: true }
            : undefined,
      },
      <>
        <h1>Poisoned events, grouped by cause</h1>
        <Notice text={q.nothing ? "Nothing selected to requeue." : undefined} />
        {q.requeued !== undefined ? (
          // The action's message, focused as a notice is (not on the page's own reloads).
          <div class="panel" role="status" {...focusedOnLoad(!isReload(c))}>
            <p>
              {`Requeued ${q.requeued} event${q.requeued === 1 ? "" : "s"}. `}
              {q.more ? "More poisoned before that press remain: press Requeue all again. " : ""}
              {tracked.length === 0 ? "" : trackedText(tracked.length, stillPending, poisonedAgain)}
            </p>
            {tracked.length > 0 ? <EventTable events={tracked} /> : null}
          </div>
        ) : null}
        {all.count > 0 ? (
          // Every poisoned event at once, whatever its group (an outage poisons them by
          // the thousand, ADR 0003): the groups below show at most the newest 5,000.
          <div class="actions">
            <Confirm
              label={`Requeue all ${all.count} poisoned`}
              says={`Puts ${all.count} poisoned event${all.count === 1 ? "" : "s"} back in the queue, oldest first: each is fanned out again to every subscription.`}
            >
              <form method="post" action="/dashboard/poisoned/requeue-all">
                <input type="hidden" name="upTo" value={all.upTo} />
                <button class="btn" type="submit">
                  {`Yes, requeue all ${all.count}`}
                </button>
              </form>
            </Confirm>
            <span class="muted">{`oldest first, ${(ALL_ROUNDS_PER_PRESS * REQUEUE_POISONED_BATCH).toLocaleString("en")} a press`}</span>
          </div>
        ) : null}
        {groups.length === 0 ? (
          <p class="muted">No poisoned events.</p>
        ) : (
          <p class="muted">
            {`${scanned} poisoned event${scanned === 1 ? "" : "s"} in ${groups.length} group${groups.length === 1 ? "" : "s"}`}
            {truncated ? ` (the newest ${scanned}; older ones appear as these are requeued)` : ""}
          </p>
        )}
        {groups.map((g, i) => (
          <Group group={g} n={i + 1} />
        ))}
      </>,
    );
  });

  dashboard.post("/poisoned/requeue-all", valid("form", requeueAllForm), async (c) => {
    const { upTo } = c.req.valid("form");
    const { requeued, more } = await requeuePoisonedInRounds(
      c.var.pool,
      { upTo },
      { maxRounds: ALL_ROUNDS_PER_PRESS },
    );
    if (requeued > 0) c.var.background(kickRelay(c.var.pool, c.var.config));
    return c.redirect(`/dashboard/poisoned?requeued=${requeued}${more ? "&more=1" : ""}`, 303);
  });

  dashboard.post("/poisoned/requeue", valid("form", requeueForm), async (c) => {
    const form = c.req.valid("form");
    const ids =
      form.fingerprint !== undefined
        ? await poisonedIdsWithFingerprint(c.var.pool, form.fingerprint)
        : form.id;
    if (ids.length === 0) {
      return c.redirect("/dashboard/poisoned?nothing=1", 303);
    }
    const result = await requeue(c.var.pool, ids);
    // Requeued rows are pending again; a kick fans them out now rather than at the next cron sweep.
    if (result.requeued.length > 0) c.var.background(kickRelay(c.var.pool, c.var.config));
    if (form.back === "event" && ids.length === 1) {
      const outcome = result.requeued.length === 1 ? "requeued" : "unchanged";
      return c.redirect(`/dashboard/events/${ids[0]}?${outcome}=1`, 303);
    }
    const track = result.requeued.slice(0, TRACKED).join(",");
    return c.redirect(`/dashboard/poisoned?requeued=${result.requeued.length}&track=${track}`, 303);
  });
}
