import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { drizzle } from "drizzle-orm/node-postgres";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import {
  ALERTS_LISTED_PER_NOTICE,
  sendAlertNotice,
  type AlertNotice,
} from "../../src/domain/alert-notices.ts";
import type { Db } from "../../src/domain/db.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

// ADR 0046: the sweep tells ALERT_WEBHOOK_URL of each new open alert, once, against
// real Postgres and a real HTTP receiver that can be told to fail or hang.
const t = useTestDatabase();
const db = () => t.db as unknown as Db;
const label = "edge-outbox-test";
const publicUrl = "https://outbox.example.com";

let server: Server;
let url: string;
let received: AlertNotice[] = [];
let answer: "ok" | "fail" | "hang" = "ok";
beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      if (answer === "hang") return; // never answers; the sender's timeout ends it
      received.push(JSON.parse(body) as AlertNotice);
      res.writeHead(answer === "ok" ? 200 : 500).end(answer);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/ops`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});
beforeEach(async () => {
  received = [];
  answer = "ok";
  await t.pool.query("TRUNCATE outbox_alerts RESTART IDENTITY");
});

const raise = (kind: string, message: string, extra = "") =>
  t.pool.query(
    `INSERT INTO outbox_alerts (kind, message${extra ? ", resolved_at" : ""}) VALUES ($1, $2${extra})`,
    [kind, message],
  );
const send = (d: Db = db(), timeoutMs?: number) =>
  sendAlertNotice(d, { url, label, publicUrl, ...(timeoutMs ? { timeoutMs } : {}) });

describe("the sweep's alert notice", () => {
  it("tells of each new open alert once, in one request, oldest first", async () => {
    await raise("jobs.not_arriving", "jobs do not reach this Worker: …");
    await raise("job.failed", "2 jobs for corpus.index ran out of retries");
    await raise("event.poisoned", "resolved before any sweep saw it", ", now()");
    expect(await send()).toEqual({ sent: 2 });
    expect(received).toHaveLength(1);
    expect(received[0]).toEqual({
      text:
        "edge-outbox-test: 2 new alerts (1 jobs.not_arriving, 1 job.failed)\n" +
        "- jobs.not_arriving: jobs do not reach this Worker: …\n" +
        "- job.failed: 2 jobs for corpus.index ran out of retries\n" +
        "https://outbox.example.com/dashboard/alerts",
      deployment: label,
      dashboard: "https://outbox.example.com/dashboard/alerts",
      alerts: [
        expect.objectContaining({ id: 1, kind: "jobs.not_arriving", createdAt: expect.any(String) }),
        expect.objectContaining({
          id: 2,
          kind: "job.failed",
          message: "2 jobs for corpus.index ran out of retries",
        }),
      ],
    });
    // Told once: the next sweep has nothing new, until a new alert opens, and a 2xx
    // answer is what holds them, not the claim's lease (here run out).
    expect(await send()).toEqual({ sent: 0 });
    await t.pool.query("UPDATE outbox_alerts SET notice_claimed_at = now() - interval '3 minutes'");
    expect(await send()).toEqual({ sent: 0 });
    await raise("relay.lagging", "the relay is behind");
    expect(await send()).toEqual({ sent: 1 });
    expect(received.map((n) => n.alerts.map((a) => a.id))).toEqual([[1, 2], [3 + 1]]);
  });

  it("puts them back when the receiver fails or hangs, and the next sweep tells of them", async () => {
    await raise("jobs.foreign", "canary jobs of another deployment reached this Worker");
    answer = "fail";
    expect(await send()).toEqual({ sent: 0, error: "ALERT_WEBHOOK_URL answered 500" });
    answer = "hang";
    expect(await send(db(), 200)).toEqual({
      sent: 0,
      error: expect.stringMatching(/^ALERT_WEBHOOK_URL not reached: .*(timeout|aborted)/i),
    });
    answer = "ok";
    expect(await send()).toEqual({ sent: 1 });
    // Two refused tries and the one that was taken, each with the alert.
    expect(received.map((n) => n.alerts.map((a) => a.kind))).toEqual([["jobs.foreign"], ["jobs.foreign"]]);
  });

  it("lists twenty and counts the rest", async () => {
    for (let i = 0; i < ALERTS_LISTED_PER_NOTICE + 3; i++)
      await raise("event.poisoned", `type t${i} poisoned`);
    expect(await send()).toEqual({ sent: ALERTS_LISTED_PER_NOTICE + 3 });
    const lines = received[0]!.text.split("\n");
    expect(lines[0]).toBe("edge-outbox-test: 23 new alerts");
    expect(lines.filter((l) => l.startsWith("- "))).toHaveLength(ALERTS_LISTED_PER_NOTICE);
    expect(lines.at(-2)).toBe("… and 3 more (3 event.poisoned)");
    expect(received[0]!.alerts).toHaveLength(23);
  });

  it("names every kind of a burst: one outage's twenty alerts do not hide another kind's one", async () => {
    for (let i = 0; i < 25; i++) await raise("webhook.delivery_failed", `endpoint ${i} failed`);
    await raise("job.failed", "1 job for notify.mail ran out of retries");
    await send();
    const lines = received[0]!.text.split("\n");
    expect(lines[0]).toBe("edge-outbox-test: 26 new alerts (25 webhook.delivery_failed, 1 job.failed)");
    expect(lines).toContain("- job.failed: 1 job for notify.mail ran out of retries");
    expect(lines.at(-2)).toBe("… and 6 more (6 webhook.delivery_failed)");
  });

  it("keeps URLs' queries (a tenant endpoint's token) and chat markup out of the notice", async () => {
    await raise(
      "webhook.delivery_failed",
      "1 delivery failure at webhook endpoint e1 (https://hooks.example.com/in?token=SECRET123&x=1): <!channel> answered 500",
    );
    await send();
    const notice = received[0]!;
    expect(JSON.stringify(notice)).not.toContain("SECRET123");
    expect(notice.alerts[0]!.message).toBe(
      "1 delivery failure at webhook endpoint e1 (https://hooks.example.com/in?…): <!channel> answered 500",
    );
    expect(notice.text.split("\n")[1]).toBe(
      "- webhook.delivery_failed: 1 delivery failure at webhook endpoint e1 (https://hooks.example.com/in?…): &lt;!channel&gt; answered 500",
    );
  });

  it("takes back the alerts of a run that died between its claim and the receiver's answer", async () => {
    await raise("relay.failing", "the relay keeps failing");
    // What a run cut off after its claim leaves: a claim, no answer recorded.
    await t.pool.query("UPDATE outbox_alerts SET notice_claimed_at = now()");
    expect(await send()).toEqual({ sent: 0 });
    await t.pool.query("UPDATE outbox_alerts SET notice_claimed_at = now() - interval '3 minutes'");
    expect(await send()).toEqual({ sent: 1 });
    expect(await send()).toEqual({ sent: 0 });
    expect(received).toHaveLength(1);
  });

  it("tells of an alert once when two sweeps run at once", async () => {
    await raise("relay.failing", "the relay keeps failing");
    const other = drizzle(t.newPool(2)) as unknown as Db;
    const results = await Promise.all([send(), send(other)]);
    expect(results.map((r) => r.sent).sort()).toEqual([0, 1]);
    expect(received).toHaveLength(1);
  });
});

describe("the sweep", () => {
  async function sweep(env: Record<string, string>): Promise<string> {
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    try {
      await createScheduled(openTestPool(t.pool))(
        {} as ScheduledController,
        bindings({ DATABASE_URL: t.url, ...env }),
        executionContext().ctx,
      );
      return String(log.mock.calls.find((c) => String(c[0]).startsWith("sweep:"))?.[0]);
    } finally {
      log.mockRestore();
    }
  }

  it("sends the notice as its last step when ALERT_WEBHOOK_URL is set, and says what it did", async () => {
    // A kind no sweep step resolves by itself.
    await raise("job.failed", "1 job for notify.mail ran out of retries");
    expect(await sweep({})).toMatch(/; alert notice: off \(ALERT_WEBHOOK_URL unset\); \d+ ms$/);
    expect(received).toEqual([]);
    const line = await sweep({ ALERT_WEBHOOK_URL: url });
    // This sweep's own canary alert is not raised yet (no canary has been late), so one alert.
    expect(line).toMatch(/; alert notice: 1 new alert sent; \d+ ms$/);
    expect(received.map((n) => n.alerts.map((a) => a.kind))).toEqual([["job.failed"]]);
    expect(received[0]!.deployment).toBe("edge-outbox-127-0-0-1-8787");
    // A label of the operator's own is named as the product's.
    await raise("job.failed", "1 job for corpus.index ran out of retries");
    await sweep({ ALERT_WEBHOOK_URL: url, QSTASH_LABEL: "prod-eu" });
    expect(received[1]!.text.split("\n")[0]).toBe("edge-outbox prod-eu: 1 new alert");
  });

  it("still sends the notice when an earlier step fails the sweep", async () => {
    await raise("job.failed", "1 job for notify.mail ran out of retries");
    await t.pool.query("ALTER TABLE mail_sends RENAME TO mail_sends_away");
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      await expect(sweep({ ALERT_WEBHOOK_URL: url })).rejects.toThrow(/record retention/);
      expect(errors.mock.calls.map((c) => String(c[0]))).toContain(
        "sweep failed, alert notice: 1 new alert sent",
      );
    } finally {
      errors.mockRestore();
      await t.pool.query("ALTER TABLE mail_sends_away RENAME TO mail_sends");
    }
    expect(received.map((n) => n.alerts.map((a) => a.kind))).toEqual([["job.failed"]]);
  });
});
