import type pg from "pg";
import { createApp } from "../../src/worker/app.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { seedEvents } from "./events.ts";
import { executionContext } from "./worker.ts";

export const ORIGIN = "http://127.0.0.1:8787";

export interface Page {
  status: number;
  headers: Headers;
  /** The body with layout whitespace between tags removed. */
  text: string;
}

/**
 * A browser-like client for the dashboard through the app as the Worker runs it:
 * it keeps the session cookie it is given and sends this site's Origin on posts
 * (as a browser does for a same-site form), unless a test says otherwise.
 */
export function dashboardClient(env: () => Bindings, origin = ORIGIN) {
  const app = createApp();
  let cookie: string | undefined;

  async function send(path: string, init: RequestInit = {}): Promise<Page> {
    const { ctx, settled } = executionContext();
    const headers = new Headers(init.headers);
    if (cookie && !headers.has("cookie")) headers.set("cookie", cookie);
    const res = await app.request(`${origin}${path}`, { redirect: "manual", ...init, headers }, env(), ctx);
    const text = (await res.text()).replace(/>\s+</g, "><");
    await settled();
    const set = res.headers.get("set-cookie");
    if (set) {
      const [pair] = set.split(";");
      cookie = /=$/.test(pair!) || /Max-Age=0/i.test(set) ? undefined : pair;
    }
    return { status: res.status, headers: res.headers, text };
  }

  return {
    get: (path: string, headers: Record<string, string> = {}) => send(path, { headers }),
    post: (path: string, form: Record<string, string | string[]>, headers: Record<string, string> = {}) => {
      const body = new URLSearchParams();
      for (const [k, v] of Object.entries(form)) for (const one of [v].flat()) body.append(k, one);
      return send(path, {
        method: "POST",
        headers: { Origin: origin, "content-type": "application/x-www-form-urlencoded", ...headers },
        body: body.toString(),
      });
    },
    async login(password = env().ADMIN_TOKEN!, headers: Record<string, string> = {}) {
      return this.post("/dashboard/login", { password, next: "/dashboard" }, headers);
    },
    get cookie() {
      return cookie;
    },
    set cookie(value: string | undefined) {
      cookie = value;
    },
  };
}

/** Poisons one new event with this error; returns its id. */
export async function poison(pool: pg.Pool, error: string, type = "supplier.connected"): Promise<string> {
  const [id] = await seedEvents(pool, 1, { type });
  await pool.query(
    `UPDATE events SET poisoned_at = now(), attempts = 5, last_error = $2, next_attempt_at = now() + interval '1 hour'
      WHERE id = $1`,
    [id, error],
  );
  return id!;
}

export async function stateOf(pool: pg.Pool, id: string) {
  const { rows } = await pool.query(`SELECT poisoned_at, fanned_out_at, attempts FROM events WHERE id = $1`, [
    id,
  ]);
  return rows[0] as { poisoned_at: Date | null; fanned_out_at: Date | null; attempts: number };
}
