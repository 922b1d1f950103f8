import { readFile } from "node:fs/promises";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { Bindings } from "../../src/worker/env.ts";
import { RATE_LIMIT_PERIOD_SECONDS } from "../../src/worker/rate-limit.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// The tenant keys' request budget, with a limiter that counts like Cloudflare's
// binding does from the Worker's side (one call per request, a key, success or not).
// The real binding, in workerd, is exercised in workerd-rate-limit.test.ts.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
let keyA: string;
let keyB: string;

/** A budget of `limit` requests per key; `keys` records what it was asked about. */
function limiter(limit: number) {
  const used = new Map<string, number>();
  const keys: string[] = [];
  const binding: RateLimit = {
    async limit({ key }) {
      keys.push(key);
      used.set(key, (used.get(key) ?? 0) + 1);
      return { success: used.get(key)! <= limit };
    },
  };
  return { binding, keys };
}

beforeAll(async () => {
  env = bindings({ DATABASE_URL: t.url });
  keyA = await newApiKey(t.db, "rate-a");
  keyB = await newApiKey(t.db, "rate-b");
});
afterEach(() => vi.restoreAllMocks());

describe("each API key's request budget", () => {
  it("refuses a key over it with 429 and Retry-After, in the envelope; another key is not touched", async () => {
    const { binding, keys } = limiter(3);
    const limited = { ...env, API_RATE_LIMIT: binding };
    const asA = () => call(app, limited, "GET", "/notes/search?q=x", undefined, withKey(keyA));
    for (let i = 0; i < 3; i++) expect((await asA()).status).toBe(200);
    const over = await asA();
    expect(over.status).toBe(429);
    expect(over.headers.get("retry-after")).toBe(String(RATE_LIMIT_PERIOD_SECONDS));
    expect(over.body.error).toMatchObject({
      code: "TOO_MANY_REQUESTS",
      message: `this API key has used its request budget for now; try again in ${RATE_LIMIT_PERIOD_SECONDS} s`,
      requestId: expect.any(String),
    });
    // A write over the budget is refused before anything is written.
    const write = await call(app, limited, "POST", "/notes", { title: "over" }, withKey(keyA));
    expect(write.status).toBe(429);
    const { rows } = await t.pool.query("SELECT count(*)::int AS n FROM corpus_notes WHERE title = 'over'");
    expect(rows[0].n).toBe(0);

    expect((await call(app, limited, "GET", "/notes/search?q=x", undefined, withKey(keyB))).status).toBe(200);
    // Counted by the key's id, never by the secret itself.
    expect(keys.some((k) => k === keyA || k === keyB)).toBe(false);
    expect(new Set(keys).size).toBe(2);
  });

  it("counts only authenticated tenants: no key, a wrong key, the operator's and QStash's routes are not counted", async () => {
    const { binding, keys } = limiter(1);
    const limited = { ...env, API_RATE_LIMIT: binding };
    expect((await call(app, limited, "GET", "/notes/search?q=x")).status).toBe(401);
    expect(
      (await call(app, limited, "GET", "/notes/search?q=x", undefined, withKey("eo_wrong"))).status,
    ).toBe(401);
    const admin = { headers: { authorization: `Bearer ${env.ADMIN_TOKEN}` } };
    for (let i = 0; i < 3; i++)
      expect((await call(app, limited, "GET", "/admin/stats", undefined, admin)).status).toBe(200);
    expect(keys).toEqual([]);
  });

  it("lets requests through when the limiter itself fails, and says so once", async () => {
    const broken: RateLimit = { limit: () => Promise.reject(new Error("limiter unreachable")) };
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const limited = { ...env, API_RATE_LIMIT: broken };
    for (let i = 0; i < 3; i++)
      expect((await call(app, limited, "GET", "/notes/search?q=x", undefined, withKey(keyA))).status).toBe(
        200,
      );
    const said = errors.mock.calls.map((c) => String(c[0])).filter((line) => line.includes("API_RATE_LIMIT"));
    expect(said).toEqual(["API_RATE_LIMIT failed, requests are not limited: limiter unreachable"]);
  });

  it("wrangler.toml binds it with the period the Retry-After names", async () => {
    const toml = await readFile(new URL("../../wrangler.toml", import.meta.url), "utf8");
    const block =
      /\[\[ratelimits\]\]\s*\nname = "API_RATE_LIMIT"\s*\nnamespace_id = "\d+"\s*\nsimple = \{ limit = (\d+), period = (\d+) \}/.exec(
        toml,
      );
    expect(block, "wrangler.toml's [[ratelimits]] API_RATE_LIMIT").not.toBeNull();
    expect(Number(block![2])).toBe(RATE_LIMIT_PERIOD_SECONDS);
    expect(Number(block![1])).toBeGreaterThan(0);
  });
});
