import type { MiddlewareHandler } from "hono";
import type { HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";
import { isSafeMethod } from "./methods.ts";
import { isDomainPath } from "./tenant-auth.ts";

/** The longest a write waits for its fan-out before answering 202 with a link to poll. */
export const MAX_WAIT_SECONDS = 10;

/**
 * Reads `wait=N` from the Prefer header (RFC 7240 §4.3: N is delta-seconds).
 * - absent: undefined (answer at once, without waiting);
 * - N above MAX_WAIT_SECONDS, however many digits: clamped, and Preference-Applied
 *   says the value used;
 * - N that is not delta-seconds (`wait=soon`, `wait=-1`, `wait=1.5`): a 400. RFC 7240
 *   lets a server ignore a preference it does not understand, but a caller that asked
 *   to wait and silently got an immediate answer would read a missing receipt as
 *   "not fanned out"; the 400 is raised before the write runs, so nothing commits.
 * Other preferences (respond-async, return=…) are ignored, as RFC 7240 allows.
 */
export function parseWait(header: string | undefined): number | undefined {
  if (!header) return undefined;
  for (const preference of header.split(",")) {
    // A preference may carry parameters after `;`; wait has none worth reading.
    const [token = ""] = preference.split(";");
    // A bare `wait` asks to wait and names no time: refused as `wait=` is.
    const match = token.trim().match(/^wait(?:\s*=\s*(.*))?$/i);
    if (!match) continue;
    const value = (match[1] ?? "").trim().replace(/^"(.*)"$/, "$1");
    if (!/^\d+$/.test(value)) {
      throw new ApiError(
        "BAD_REQUEST",
        `Prefer: wait must be a whole number of seconds (more than ${MAX_WAIT_SECONDS} waits ${MAX_WAIT_SECONDS}), got "${value.slice(0, 40)}"`,
        [{ path: "header.prefer", message: "wait must be a whole number of seconds" }],
      );
    }
    // Leading zeros and any length are delta-seconds too; Number() of a long run is just large.
    return Math.min(Number(value), MAX_WAIT_SECONDS);
  }
  return undefined;
}

/**
 * Parses Prefer before the handler runs, so a malformed one rejects the write before
 * it commits. Only the domain routes' writes wait for a fan-out: an operator's, a
 * job's or a dashboard form's request never does, so its Prefer is not read (a
 * malformed one answered an operator call without its token 400 instead of 401,
 * and a dashboard login a JSON error).
 */
export const preferWait: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (!isSafeMethod(c.req.method) && isDomainPath(c.req.path))
    c.set("wait", parseWait(c.req.header("prefer")));
  await next();
};
