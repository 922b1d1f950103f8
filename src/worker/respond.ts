import type { Context } from "hono";
import type { HonoEnv } from "./env.ts";

/**
 * How every write answers: its result plus the ids of the events it committed.
 * The single place where write responses are made, so the relay kick
 * (`c.var.background(drain({ pool: c.var.pool, … }))`) and the `Prefer: wait=N` receipt are added here
 * once, for every write route, when the relay core is available.
 */
export function written<T extends Record<string, unknown>>(
  c: Context<HonoEnv>,
  result: T,
  eventIds: string[],
  status: 200 | 201 = 200,
) {
  return c.json({ ...result, events: eventIds.map((id) => ({ id })) }, status);
}
