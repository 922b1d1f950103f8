import { describe, expect, it } from "vitest";
import { devVars } from "../../infra/dev-vars.ts";

describe("npm run dev's .dev.vars", () => {
  const stack = {
    DATABASE_URL: "postgres://stack",
    QSTASH_URL: "http://127.0.0.1:1",
    ADMIN_TOKEN: "generated-token-123",
  };

  it("passes every other binding the Worker reads through from the environment", () => {
    const vars = devVars(stack, {
      MAX_BODY_BYTES: "2048",
      RELAY_BACKOFF_CAP_SECONDS: "5",
      QSTASH_BATCH_MESSAGES: "100",
      RETENTION_DAYS: "7",
      WEBHOOK_RETRY_SCHEDULE: "1,1,1",
      MAIL_TO: "me@example.com",
      // Not a binding: stays out.
      HOME: "/root",
      PATH: "/usr/bin",
    });
    expect(vars).toEqual({
      ...stack,
      MAX_BODY_BYTES: "2048",
      RELAY_BACKOFF_CAP_SECONDS: "5",
      QSTASH_BATCH_MESSAGES: "100",
      RETENTION_DAYS: "7",
      WEBHOOK_RETRY_SCHEDULE: "1,1,1",
      MAIL_TO: "me@example.com",
    });
  });

  it("keeps what the stack set up over the environment's value, and skips empty values", () => {
    // The stack's DATABASE_URL is the pooler's, whatever database the environment named.
    const vars = devVars(stack, {
      DATABASE_URL: "postgres://mine",
      QSTASH_URL: "https://elsewhere",
      MAIL_TO: "",
    });
    expect(vars).toEqual(stack);
  });
});
