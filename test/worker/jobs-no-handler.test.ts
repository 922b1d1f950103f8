import { beforeAll, describe, expect, it, vi } from "vitest";
import { signJwt } from "../../infra/qstash-dev/signing.ts";
import type * as JobHandlersModule from "../../src/domain/job-handlers.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { relayJobBody } from "../support/job-failures.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// A subscription whose handler is missing: the type of createJobHandlers forbids
// it, but `wrangler dev` and `wrangler deploy` bundle without typechecking (a
// walkthrough deleted a handler and the Worker reloaded without a word). Here the
// handler map loses notify.mail's entry the same way.
vi.mock("../../src/domain/job-handlers.ts", async (importOriginal) => {
  const real = await importOriginal<typeof JobHandlersModule>();
  return {
    ...real,
    createJobHandlers: (...args: Parameters<typeof real.createJobHandlers>) => {
      const { ["notify.mail"]: _dropped, ...rest } = real.createJobHandlers(...args);
      return rest;
    },
  };
});

const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});

const deliver = (path: string, body: string) =>
  call(app, env, "POST", path, body, {
    headers: {
      "upstash-signature": signJwt({
        key: env.QSTASH_CURRENT_SIGNING_KEY!,
        url: `${env.PUBLIC_URL}${path}`,
        body: Buffer.from(body),
      }),
    },
  });

describe("a job of a subscription with no handler", () => {
  it("is a 500 QStash retries, saying the handler is missing, logged; an unknown name stays a 404", async () => {
    const log = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const res = await deliver("/jobs/notify.mail", relayJobBody("notify.mail"));
      expect(res.status).toBe(500);
      expect(res.body.error).toMatchObject({
        code: "MISCONFIGURED",
        message:
          "subscription notify.mail has no job handler: add it to createJobHandlers (src/domain/job-handlers.ts) " +
          "and deploy; QStash retries its jobs meanwhile",
      });
      expect(log.mock.calls.flat().join(" ")).toContain("subscription notify.mail has no job handler");
      const unknown = await deliver("/jobs/orders.audit", relayJobBody("orders.audit"));
      expect(unknown.status).toBe(404);
      expect(unknown.body.error.message).toBe("no subscription orders.audit");
    } finally {
      log.mockRestore();
    }
  });
});
