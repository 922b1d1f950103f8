import { afterEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/worker/app.ts";
import { parseConfig } from "../../src/worker/env.ts";
import { bindings, call } from "../support/worker.ts";

const app = createApp();

afterEach(() => vi.restoreAllMocks());

describe("bindings are validated once, at the entry", () => {
  it("a missing binding answers 500 with one message naming it, logged once", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const env = bindings();
    delete env.QSTASH_TOKEN;
    for (const path of ["/healthz", "/notes/search?q=x"]) {
      const res = await call(app, env, "GET", path);
      expect(res.status).toBe(500);
      expect(res.body.error).toMatchObject({
        code: "MISCONFIGURED",
        message: "Worker misconfigured: binding QSTASH_TOKEN is missing",
      });
      expect(res.body.error.requestId).toBe(res.headers.get("x-request-id"));
    }
    expect(errors.mock.calls).toEqual([["Worker misconfigured: binding QSTASH_TOKEN is missing"]]);
  });

  it("names every malformed binding and says what is expected", async () => {
    vi.spyOn(console, "error").mockImplementation(() => undefined);
    const res = await call(
      app,
      bindings({
        DATABASE_URL: "mysql://db/x",
        PUBLIC_URL: "not a url",
        ADMIN_TOKEN: "short",
        QSTASH_URL: "",
      }),
      "POST",
      "/notes",
      { title: "x" },
    );
    expect(res.status).toBe(500);
    const message: string = res.body.error.message;
    expect(message).toContain(
      "binding DATABASE_URL must be a postgres:// or postgresql:// connection string",
    );
    expect(message).toContain("binding PUBLIC_URL must be an http(s) URL");
    expect(message).toContain("binding ADMIN_TOKEN must be at least 16 characters");
    // An empty optional var means "use the default", not a misconfiguration.
    expect(message).not.toContain("QSTASH_URL");
  });

  it("takes PUBLIC_URL as an origin only: a path sent QStash's jobs to a route that is none", () => {
    // With "/eo", jobs went to /eo/jobs/…, which answered 401 "an API key is required"
    // with nothing logged, for hours until their retries ran out (the config walkthrough).
    for (const url of [
      "https://outbox.example.com/eo",
      "https://outbox.example.com/?x=1",
      "https://outbox.example.com/#a",
    ]) {
      const result = parseConfig(bindings({ PUBLIC_URL: url }));
      expect(result.ok, url).toBe(false);
      expect(!result.ok && result.message, url).toContain(
        "binding PUBLIC_URL must be the Worker's origin alone, e.g. https://outbox.example.com: its routes are at the root, so a path, query or fragment sends QStash's jobs nowhere",
      );
    }
    expect(parseConfig(bindings({ PUBLIC_URL: "https://outbox.example.com:8443/" })).ok).toBe(true);
  });

  it("takes ALERT_WEBHOOK_URL as an http(s) URL, and nothing without it", () => {
    const unset = parseConfig(bindings({}));
    expect(unset.ok && unset.config.ALERT_WEBHOOK_URL).toBeUndefined();
    const set = parseConfig(bindings({ ALERT_WEBHOOK_URL: "https://hooks.example.com/services/T0/B0/x" }));
    expect(set.ok && set.config.ALERT_WEBHOOK_URL).toBe("https://hooks.example.com/services/T0/B0/x");
    const wrong = parseConfig(bindings({ ALERT_WEBHOOK_URL: "hooks.example.com/x" }));
    expect(!wrong.ok && wrong.message).toBe(
      "Worker misconfigured: binding ALERT_WEBHOOK_URL must be an http(s) URL",
    );
  });

  it("applies defaults and normalises URLs", () => {
    const result = parseConfig(
      bindings({ PUBLIC_URL: "https://outbox.example.com/", NEON_WS_PROXY: "", QSTASH_URL: undefined }),
    );
    expect(result).toMatchObject({
      ok: true,
      config: { QSTASH_URL: "https://qstash.upstash.io", PUBLIC_URL: "https://outbox.example.com" },
    });
    expect(result.ok && result.config.NEON_WS_PROXY).toBeUndefined();
  });

  it("defaults and checks the optional mail and retention bindings", () => {
    expect(parseConfig(bindings())).toMatchObject({
      ok: true,
      config: { MAIL_TO: "ops@example.com", RETENTION_DAYS: 30 },
    });
    expect(parseConfig(bindings({ MAIL_TO: "team@example.org", RETENTION_DAYS: "7" }))).toMatchObject({
      ok: true,
      config: { MAIL_TO: "team@example.org", RETENTION_DAYS: 7 },
    });
    // Mail sent for real needs its address: the default named nobody who reads mail.
    for (const MAIL_TO of [undefined, "", " "])
      expect(parseConfig(bindings({ MAIL_API_URL: "https://mail.example.org/send", MAIL_TO }))).toEqual({
        ok: false,
        message:
          "Worker misconfigured: binding MAIL_TO must be set with MAIL_API_URL: the address supplier mails go to",
      });
    expect(
      parseConfig(bindings({ MAIL_API_URL: "https://mail.example.org/send", MAIL_TO: "team@example.org" })),
    ).toMatchObject({ ok: true, config: { MAIL_TO: "team@example.org" } });
    expect(
      parseConfig(bindings({ MAIL_API_URL: "https://mail.example.org/send", PUBLIC_URL: "nope" })),
    ).toEqual({
      ok: false,
      message:
        "Worker misconfigured: binding PUBLIC_URL must be an http(s) URL; binding MAIL_TO must be set with MAIL_API_URL: the address supplier mails go to",
    });
    const bad = parseConfig(bindings({ MAIL_TO: "nobody", RETENTION_DAYS: "0.5" }));
    expect(bad).toEqual({
      ok: false,
      message:
        "Worker misconfigured: binding MAIL_TO must be an e-mail address; binding RETENTION_DAYS must be a whole number of days",
    });
  });
});
