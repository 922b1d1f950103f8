import { describe, expect, it } from "vitest";
import { createJobHandlers, type JobHandlers } from "../../src/domain/job-handlers.ts";
import { noopMailer } from "../../src/domain/mail/mailer.ts";
import { subscriptions } from "../../src/domain/subscriptions.ts";
import type { JobHandler } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";

const t = useTestDatabase();
const done: JobHandler = async () => undefined;

describe("job handlers", () => {
  it("a subscription without a handler does not compile", () => {
    // `npm test` typechecks this file: if JobHandlers stopped naming every
    // subscription, the directive below would be unused, which tsc reports.
    // @ts-expect-error notify.mail has no handler
    const missing: JobHandlers = { "corpus.index": done, "webhook.fanout": done };
    expect(Object.keys(missing)).not.toContain("notify.mail");
  });

  it("every declared subscription has a handler at run time too", () => {
    const handlers: Record<string, unknown> = createJobHandlers({
      db: t.db,
      mailer: noopMailer,
      mailTo: "ops@example.com",
      deliverQueue: { enqueue: () => Promise.reject(new Error("no QStash in this test")) },
    });
    for (const s of subscriptions) expect(typeof handlers[s.name], s.name).toBe("function");
  });
});
