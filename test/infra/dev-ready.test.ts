import { describe, expect, it } from "vitest";
import { createApp } from "../../src/worker/app.ts";
import { healthzVerdict } from "../../infra/dev-ready.ts";
import { bindings, call } from "../support/worker.ts";

// The stack's wait for wrangler dev, given what the Worker itself answers /healthz.
describe("npm run dev's wait for the Worker", () => {
  it("stops at once on a binding the Worker refuses, naming it, where it polled for 2 minutes", async () => {
    const res = await call(createApp(), bindings({ RETENTION_DAYS: "abc" }), "GET", "/healthz");
    expect(res.status).toBe(500);
    expect(healthzVerdict(res.status, JSON.stringify(res.body))).toEqual({
      ready: false,
      fatal:
        "the Worker answers /healthz 500: Worker misconfigured: binding RETENTION_DAYS must be a whole number of days",
    });
  });

  it("is ready on a 200 and waits out anything else", () => {
    expect(healthzVerdict(200, "{}")).toEqual({ ready: true });
    expect(healthzVerdict(503, '{"error":{"code":"SERVICE_UNAVAILABLE","message":"x"}}')).toEqual({
      ready: false,
    });
    // wrangler's own page while it starts, and a 500 that is not the Worker's settings.
    expect(healthzVerdict(500, "<html>starting</html>")).toEqual({ ready: false });
    expect(healthzVerdict(500, '{"error":{"code":"INTERNAL_SERVER_ERROR","message":"x"}}')).toEqual({
      ready: false,
    });
  });
});
