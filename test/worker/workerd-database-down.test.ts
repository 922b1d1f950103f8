import { beforeAll, describe, expect, it } from "vitest";
import { request, useWorkerd } from "../support/workerd.ts";
import { newApiKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";

// The real bundle in workerd with its database out of reach: the Neon driver's
// WebSocket never opens (nothing listens on port 1). There the driver rejects with
// the socket's ErrorEvent, not an Error, which Hono does not hand to onError: routes
// the relay core serves answered workerd's own "500 Uncaught Error: internal error",
// and Drizzle's routes a 500 INTERNAL_SERVER_ERROR, where a client must be told 503,
// try again shortly.
const t = useTestDatabase();
const stack = useWorkerd(t, { NEON_WS_PROXY: "127.0.0.1:1" });
const admin = { Authorization: "Bearer " };

let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
  admin.Authorization = `Bearer ${stack.env.ADMIN_TOKEN}`;
});

describe("the Worker with its database out of reach", () => {
  it.each([
    ["GET", "/admin/stats", "operator"],
    ["GET", "/admin/events", "operator"],
    ["GET", "/admin/webhooks/endpoints", "operator"],
    ["POST", "/notes", "tenant"],
    ["GET", "/notes/search?q=x", "tenant"],
  ])("%s %s answers 503 in the envelope, with Retry-After", async (method, path, who) => {
    const res = await request(
      stack,
      method,
      path,
      method === "POST" ? { title: "t" } : undefined,
      who === "operator" ? admin : { Authorization: `Bearer ${key}` },
    );
    expect(res.status, JSON.stringify(res.body)).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.body.error).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      message: expect.stringContaining("the database is unavailable (connection lost or refused)"),
    });
  });

  it("/healthz says why in a few words, never the SQL it ran", async () => {
    const res = await request(stack, "GET", "/healthz");
    expect(res.status).toBe(503);
    expect(JSON.stringify(res.body)).not.toMatch(/Failed query|SELECT/i);
    expect(JSON.stringify(res.body)).toMatch(/connection lost or refused/);
  });
});
