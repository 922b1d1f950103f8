import type { Context } from "hono";
import { awaitFanout, receiptFromKick, type Receipt } from "../outbox/index.ts";
import type { HonoEnv } from "./env.ts";
import { kickRelay } from "./relay.ts";

/**
 * How every write answers, and so the one place that kicks the relay after a
 * commit and honours `Prefer: wait=N`. Called only after the use case's
 * transaction has committed: the kick must never see (or miss) uncommitted rows.
 *
 * - Without Prefer: the result and the ids of the events it committed; the kick
 *   runs after the response (waitUntil, on the request's pool).
 * - With `Prefer: wait=N`: the same kick, awaited here up to N seconds, then the
 *   receipt, taken from the kick's own result when its passes fanned every event
 *   out, else read from the rows (until complete or N seconds passed). Every
 *   event fanned out (or poisoned): the route's own status (201 for creates,
 *   else 200) with each event's fan-out (subscription → messageId, or
 *   coalescedInto). Otherwise 202 Accepted, `Location: /events/<id>` of the
 *   first event not yet fanned out (pollLink), and the events as far as they got.
 */
export async function written<T extends Record<string, unknown>>(
  c: Context<HonoEnv>,
  result: T,
  eventIds: string[],
  status: 200 | 201 = 200,
) {
  // A write that changed nothing recorded no event: nothing to fan out or wait for,
  // so a wait asked for is met at once, and said so as for any other write.
  if (eventIds.length === 0) {
    if (c.var.wait !== undefined) c.header("Preference-Applied", `wait=${c.var.wait}`);
    return c.json({ ...result, events: [] }, status);
  }
  const kick = kickRelay(c.var.pool, c.var.config, c.var.wait === undefined ? [] : eventIds);
  // Registered either way, so the request's pool outlives a kick that outlives the wait.
  c.var.background(kick);

  const wait = c.var.wait;
  if (wait === undefined) return c.json({ ...result, events: eventIds.map((id) => ({ id })) }, status);

  const receipt = await awaitFanout(c.var.pool, eventIds, {
    deadline: Date.now() + wait * 1000,
    // When the kick's own passes fanned every event out, they answer: no read.
    kicked: kick.then((k) => (k ? receiptFromKick(eventIds, k.fannedEvents) : undefined)),
  });
  c.header("Preference-Applied", `wait=${wait}`);
  if (receipt.complete) return c.json({ ...result, events: receipt.events }, status);
  c.header("Location", pollLink(eventIds, receipt));
  // How soon to poll: a pass takes tens of milliseconds, a backed-off relay up to a minute.
  c.header("Retry-After", "1");
  return c.json({ ...result, events: receipt.events }, 202);
}

/**
 * Where a 202 sends its caller to poll: the first event still on its way. The first
 * event of an import of 2,000 was usually fanned out already, and a client polling
 * it concluded the whole write had been while 1,400 events had not.
 */
export function pollLink(eventIds: string[], receipt: Receipt): string {
  const waiting = receipt.events.find((e) => e.fannedOutAt === null && !e.poisoned);
  return `/events/${waiting?.id ?? eventIds[0]}`;
}
