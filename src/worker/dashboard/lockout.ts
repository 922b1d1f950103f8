import { sql } from "drizzle-orm";
import type { Db } from "../../domain/db.ts";
import { deleteInBatches } from "../../domain/retention.ts";
import { parseIpv4, parseIpv6 } from "../../domain/webhooks/url-safety.ts";
import type { SqlPool } from "../../outbox/index.ts";
import { isLoopbackHttp } from "./session.ts";

/** Wrong passwords allowed from one client within the window before it is locked out. */
export const LOCKOUT_POLICY = {
  maxFailures: 5,
  windowMs: 10 * 60_000,
  lockMs: 10 * 60_000,
} as const;

/**
 * When the client's lock ends, or null when it is not locked. Locked: some five
 * consecutive failures lie within the window, and the fifth of them was less
 * than `lockMs` ago. `failures` are ascending.
 */
export function lockedUntil(failures: Date[], now: Date, policy = LOCKOUT_POLICY): Date | null {
  const n = policy.maxFailures;
  for (let last = failures.length - 1; last >= n - 1; last--) {
    const fifth = failures[last]!;
    const first = failures[last - (n - 1)]!;
    if (+fifth - +first > policy.windowMs) continue;
    const until = new Date(+fifth + policy.lockMs);
    // Earlier runs end earlier still.
    return until > now ? until : null;
  }
  return null;
}

/** Whole seconds until a lock ends, at least 1: a locked client's Retry-After, at either door. */
export function retryAfterSeconds(until: Date, now = Date.now()): number {
  return Math.max(1, Math.ceil((+until - now) / 1000));
}

export type LoginOutcome = { ok: true } | { ok: false; lockedUntil: Date | null };

/**
 * One login attempt, serialised per client by a transaction-scoped advisory
 * lock: ten guesses sent at once are checked one after another, so exactly five
 * are compared and the rest are refused. A locked client's password is not even
 * compared, so a guess during the lock learns nothing.
 */
export async function attemptLogin(
  pool: SqlPool,
  client: string,
  passwordMatches: () => Promise<boolean>,
): Promise<LoginOutcome> {
  const conn = await pool.connect();
  let done = false;
  try {
    await conn.query("BEGIN");
    await conn.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`dashboard-login:${client}`]);
    const read = async () => {
      // Epoch milliseconds: float8 arrays arrive as numbers from either driver.
      const { rows } = (await conn.query(
        `SELECT extract(epoch FROM now())::float8 * 1000 AS now,
                ARRAY(SELECT extract(epoch FROM failed_at)::float8 * 1000 FROM dashboard_login_failures
                       WHERE client = $1 AND failed_at > now() - make_interval(secs => $2::float8 / 1000)
                       ORDER BY failed_at) AS failures`,
        [client, LOCKOUT_POLICY.windowMs + LOCKOUT_POLICY.lockMs],
      )) as { rows: { now: number; failures: number[] }[] };
      const row = rows[0]!;
      return lockedUntil(
        row.failures.map((ms) => new Date(Number(ms))),
        new Date(Number(row.now)),
      );
    };
    const before = await read();
    if (before) {
      await conn.query("COMMIT");
      done = true;
      return { ok: false, lockedUntil: before };
    }
    if (await passwordMatches()) {
      // Failures older than anything the lock-out reads are dead weight; this client's go now.
      await conn.query(
        `DELETE FROM dashboard_login_failures
          WHERE client = $1 AND failed_at <= now() - make_interval(secs => $2::float8 / 1000)`,
        [client, LOCKOUT_POLICY.windowMs + LOCKOUT_POLICY.lockMs],
      );
      await conn.query("COMMIT");
      done = true;
      return { ok: true };
    }
    await conn.query("INSERT INTO dashboard_login_failures (client) VALUES ($1)", [client]);
    const after = await read();
    await conn.query("COMMIT");
    done = true;
    return { ok: false, lockedUntil: after };
  } finally {
    if (!done) await conn.query("ROLLBACK").catch(() => undefined);
    conn.release();
  }
}

/**
 * The cron sweep's part: failures older than anything the lock-out reads (its window
 * and its lock) decide nothing, and only that client's next good login cleared them,
 * so wrong tokens from addresses that never logged in stayed for ever (a walkthrough's
 * 201 rows, 120 days on). In batches, as retention; answers how many went.
 */
export async function deleteStaleLoginFailures(db: Db): Promise<number> {
  return deleteInBatches(
    db,
    "dashboard_login_failures",
    (limit) => sql`SELECT id FROM dashboard_login_failures
                    WHERE failed_at <= now() - make_interval(secs => ${LOCKOUT_POLICY.windowMs + LOCKOUT_POLICY.lockMs}::float8 / 1000)
                    LIMIT ${limit}`,
  );
}

/**
 * What a lock-out says more on a local Worker, where every client is one address
 * ("local"): one script with a stale token locked the developer's own dashboard and
 * API for 10 minutes, through restarts (the failures are rows in its database).
 */
export function localLockoutHint(publicUrl: string): string {
  return isLoopbackHttp(publicUrl)
    ? " A local Worker counts every client as one address; to lift it now, in its database: " +
        "DELETE FROM dashboard_login_failures."
    : "";
}

/**
 * Who is guessing. On Cloudflare, CF-Connecting-IP is set by the edge and cannot
 * be forged by the client. A local Worker (`publicUrl` on loopback: wrangler dev,
 * `npm run dev`) has no trusted address: wrangler dev sets the header only when the
 * request has none, so a guesser could send a fresh one each time (a security
 * review's 7 wrong tokens from 7 made-up addresses, none locked). Every such client
 * shares one bucket: a lock-out then locks more people out rather than letting a
 * guesser pick a fresh address per request.
 *
 * The header's text was the bucket: anything not an address ("7.7.7.7, 1", a
 * made-up word where the header can be set) was a fresh one, and so was each IPv6
 * address, of which one subscriber commonly holds a whole /64. An IPv4 address is
 * its bucket; an IPv6 one is counted by its /64; anything else is "unknown".
 */
export function clientAddress(header: (name: string) => string | undefined, publicUrl: string): string {
  if (isLoopbackHttp(publicUrl)) return "local";
  const raw = header("CF-Connecting-IP")?.trim() ?? "";
  const v4 = parseIpv4(raw);
  if (v4 !== undefined) return [v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join(".");
  if (/^[0-9a-f:.]+$/i.test(raw) && raw.includes(":")) {
    let host: string;
    try {
      // The URL parser puts any IPv6 spelling (dotted tail, upper case) in one form.
      host = new URL(`http://[${raw}]/`).hostname.slice(1, -1);
    } catch {
      return "unknown";
    }
    const groups = parseIpv6(host);
    if (groups)
      return `${groups
        .slice(0, 4)
        .map((g) => g.toString(16))
        .join(":")}::/64`;
  }
  return "unknown";
}
