import { beforeEach, describe, expect, it } from "vitest";
import { refusedUnpublished } from "../../src/cli/args.ts";
import { notQueuedMessage } from "../../src/domain/webhooks/deliver-queue.ts";
import { PublishError } from "../../src/outbox/index.ts";
import { expectUsageErrors, runCli } from "../support/cli.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { usePausedQStash } from "../support/job-failures.ts";
import { resetOutbox } from "../support/relay.ts";
import { insertEndpoint, useSecretsKey } from "../support/webhooks.ts";

// `webhooks …` as an operator runs it: the endpoints, deliveries and attempts the
// delivery engine leaves, read back; re-sends published to the QStash dev server,
// delivery paused, so each job stays there to be looked at.
const t = useTestDatabase();
const paused = usePausedQStash(t);
const secrets = useSecretsKey();
const PUBLIC_URL = "http://127.0.0.1:8787";

beforeEach(async () => {
  await resetOutbox(t.pool);
  await t.pool.query("TRUNCATE webhook_endpoints CASCADE");
});

const dbOnly = () => ({ DATABASE_URL: t.url });
const withQStash = () => ({
  DATABASE_URL: t.url,
  QSTASH_URL: paused.qstash.url,
  QSTASH_TOKEN: paused.qstash.token,
  PUBLIC_URL,
});
const deliverJobs = () =>
  paused.qstash.messages().filter((m) => m.url === `${PUBLIC_URL}/jobs/webhook.deliver`);

type Status = "pending" | "delivered" | "failed";

/** A delivery as the engine leaves it: `answers` one attempt each (a status, or null for no answer). */
async function delivery(
  endpointId: string,
  status: Status,
  answers: (number | null)[] = [],
  fields: { eventId?: string; createdAt?: string; lastError?: string } = {},
): Promise<string> {
  const eventId = fields.eventId ?? (await seedEvents(t.pool, 1, { fanned: true, scope: "acme" }))[0]!;
  const { rows } = await t.pool.query(
    `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body, status, attempts,
                                     last_attempt_at, next_attempt_at, delivered_at, failed_at, last_error,
                                     created_at)
     VALUES ($1, $2, 'supplier.connected', 'acme', '{"type":"supplier.connected"}', $3, $4,
             CASE WHEN $4 > 0 THEN now() END,
             CASE WHEN $3 = 'pending' AND $4 > 0 THEN now() + interval '30 minutes' END,
             CASE WHEN $3 = 'delivered' THEN now() END, CASE WHEN $3 = 'failed' THEN now() END,
             $5, COALESCE($6::timestamptz, now()))
     RETURNING id`,
    [endpointId, eventId, status, answers.length, fields.lastError ?? null, fields.createdAt ?? null],
  );
  const id = rows[0].id as string;
  for (const answer of answers) {
    await t.pool.query(
      `INSERT INTO webhook_attempts (delivery_id, duration_ms, status, error, response_body)
       VALUES ($1, 12, $2, $3, $4)`,
      [id, answer, answer === null ? "timeout" : null, answer === null ? null : `answered\n  ${answer}`],
    );
  }
  return id;
}

const endpoint = (fields: { url?: string; enabled?: boolean; description?: string } = {}) =>
  insertEndpoint(t.pool, secrets.key, {
    url: fields.url ?? "https://hooks.example.com/acme",
    scope: "acme",
    types: ["supplier.*"],
    ...fields,
  });

async function deliveryRow(id: string) {
  const { rows } = await t.pool.query(
    `SELECT status, failed_at, message_id, last_error FROM webhook_deliveries WHERE id = $1`,
    [id],
  );
  return rows[0] as {
    status: Status;
    failed_at: Date | null;
    message_id: string | null;
    last_error: string | null;
  };
}

describe("outbox webhooks: what an operator reads", () => {
  it("lists endpoints with their health, as text and as JSON, and no secret", async () => {
    const healthy = await endpoint({ url: "https://hooks.example.com/ok" });
    const failing = await endpoint({ url: "https://hooks.example.com/down" });
    const off = await endpoint({ url: "https://hooks.example.com/off", enabled: false });
    await delivery(healthy.id, "delivered", [200]);
    await delivery(failing.id, "pending", [503, null]);
    await delivery(failing.id, "failed", [500]);
    await t.pool.query(`UPDATE webhook_endpoints SET failing_since = now() WHERE id = $1`, [failing.id]);

    const text = await runCli(["webhooks", "list"], dbOnly());
    expect(text.code).toBe(0);
    const [header, ...lines] = text.stdout.trim().split("\n");
    expect(header).toMatch(/^ID\s+URL\s+SCOPE\s+HEALTH\s+SUCCESS, 24 H\s+PENDING\s+FAILED$/);
    // Newest first, as GET /admin/webhooks/endpoints pages them and the dashboard lists them.
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(
          `^${off.id}\\s+https://hooks.example.com/off\\s+acme\\s+disabled\\s+no attempts\\s+0\\s+0$`,
        ),
      ),
      expect.stringMatching(
        new RegExp(
          `^${failing.id}\\s+https://hooks.example.com/down\\s+acme\\s+failing\\s+0.0 % of 3 attempts\\s+1\\s+1$`,
        ),
      ),
      expect.stringMatching(
        new RegExp(
          `^${healthy.id}\\s+https://hooks.example.com/ok\\s+acme\\s+healthy\\s+100.0 % of 1 attempt\\s+0\\s+0$`,
        ),
      ),
    ]);

    const json = await runCli(["webhooks", "list", "--json"], dbOnly());
    const listed = JSON.parse(json.stdout);
    expect(listed.map((e: { id: string }) => e.id)).toEqual([off.id, failing.id, healthy.id]);
    expect(listed[1]).toMatchObject({
      attempts24h: 3,
      succeeded24h: 0,
      pending: 1,
      failed: 1,
      enabled: true,
    });
    // Neither the sealed secret nor the dashboard's edit digest is an operator's to read.
    expect(json.stdout).not.toMatch(/secret|version/i);
  });

  it("shows an endpoint with its last day and its newest deliveries, filtered and limited", async () => {
    const { id } = await endpoint({ description: "Acme ERP" });
    const old = await delivery(id, "delivered", [200], { createdAt: "2026-01-01T00:00:00Z" });
    const failed = await delivery(id, "failed", [500, 500], { lastError: "endpoint answered 500" });
    const pending = await delivery(id, "pending", [null], { lastError: "no answer: timeout" });

    const text = await runCli(["webhooks", "show", id], dbOnly());
    expect(text.code).toBe(0);
    const out = text.stdout;
    expect(out).toContain(
      `webhook endpoint ${id}\n  url          https://hooks.example.com/acme\n  description  Acme ERP`,
    );
    expect(out).toContain("  types        supplier.*\n");
    expect(out).toContain("  health       healthy");
    // It has a failed delivery: what sends it again is named.
    expect(out).toContain(
      `  recover      webhooks recover ${id} --since <time> sends again now its deliveries that gave up or wait for a retry\n`,
    );
    // Upper-case globs, taken before 2026-12-07, match no event: said, not left as healthy-looking.
    await t.pool.query(
      "UPDATE webhook_endpoints SET types = '{Supplier.*,note.*,Order.Created}' WHERE id = $1",
      [id],
    );
    expect((await runCli(["webhooks", "show", id], dbOnly())).stdout).toContain(
      '  types        Supplier.*, note.*, Order.Created ("Supplier.*", "Order.Created" match no event (event types are lower case): save the types in lower case)\n',
    );
    await t.pool.query("UPDATE webhook_endpoints SET types = '{supplier.*}' WHERE id = $1", [id]);
    // The 2026-01-01 delivery is outside the window; its attempt too (made "now" by the fixture).
    expect(out).toMatch(
      /last 24 h {4}2 deliveries \(0 delivered, 1 failed, 1 pending\); answered 2xx: 25\.0 % of 4 attempts/,
    );
    const rows = out.slice(out.indexOf("deliveries, newest first")).trim().split("\n").slice(2);
    expect(rows).toEqual([
      expect.stringMatching(
        new RegExp(`^${pending}\\s.*pending, 1 attempt, next attempt not before \\S+Z: no answer: timeout$`),
      ),
      expect.stringMatching(
        new RegExp(`^${failed}\\s.*failed \\S+Z after 2 attempts: endpoint answered 500$`),
      ),
      expect.stringMatching(
        new RegExp(`^${old}\\s+2026-01-01T00:00:00.000Z\\s.*delivered \\S+Z \\(1 attempt\\)$`),
      ),
    ]);

    const onlyFailed = JSON.parse(
      (await runCli(["webhooks", "show", id, "--status", "failed", "--json"], dbOnly())).stdout,
    );
    expect(onlyFailed.deliveries.map((d: { id: string }) => d.id)).toEqual([failed]);
    expect(onlyFailed).toMatchObject({
      endpoint: { id, scope: "acme", enabled: true },
      health: { deliveries: { total: 2, failed: 1, pending: 1 } },
      more: false,
    });
    const firstTwo = await runCli(["webhooks", "show", id, "--limit", "2"], dbOnly());
    expect(firstTwo.stdout).toContain("deliveries, newest first (more: raise --limit)");
    expect(firstTwo.stdout).not.toContain(old);
    const onlyDelivered = await runCli(
      ["webhooks", "show", id, "--status", "delivered", "--limit", "5"],
      dbOnly(),
    );
    expect(onlyDelivered.stdout).toContain(old);
    const { id: once } = await endpoint();
    await delivery(once, "failed", [410]);
    expect((await runCli(["webhooks", "show", once], dbOnly())).stdout).toMatch(
      /last 24 h {4}1 delivery \(0 delivered, 1 failed, 0 pending\)/,
    );
    const { id: quiet } = await endpoint();
    expect((await runCli(["webhooks", "show", quiet, "--status", "failed"], dbOnly())).stdout.trim()).toMatch(
      /\n\nno failed deliveries$/,
    );
  });

  it("says an endpoint that does not keep up is lagging, with its figures", async () => {
    const { id } = await endpoint();
    await t.pool.query(
      `INSERT INTO outbox_alerts (kind, subscription, message, details)
       VALUES ('webhook.endpoint_lagging', 'webhook.deliver', 'behind',
               jsonb_build_object('endpointId', $1::text, 'waiting', 7,
                                  'oldestWaitingSince', '2026-12-06T05:50:03.225Z', 'checkedAt', '2026-12-06T06:05:09.784Z'))`,
      [id],
    );
    try {
      const list = (await runCli(["webhooks", "list"], dbOnly())).stdout;
      expect(list).toMatch(new RegExp(`^${id}\\s+\\S+\\s+acme\\s+lagging\\s`, "m"));
      expect((await runCli(["webhooks", "show", id], dbOnly())).stdout).toContain(
        "  health       lagging: 7 deliveries wait for a first attempt, the oldest since 2026-12-06T05:50:03.225Z (as of 2026-12-06T06:05:09.784Z)",
      );
      const json = JSON.parse((await runCli(["webhooks", "show", id, "--json"], dbOnly())).stdout);
      expect(json.health.lagging).toEqual({
        waiting: 7,
        oldestWaitingSince: "2026-12-06T05:50:03.225Z",
        checkedAt: "2026-12-06T06:05:09.784Z",
      });
    } finally {
      await t.pool.query(
        "UPDATE outbox_alerts SET resolved_at = now() WHERE kind = 'webhook.endpoint_lagging'",
      );
    }
  });

  it("shows one delivery with its body and every attempt, and the event shows its deliveries", async () => {
    const { id: endpointId } = await endpoint();
    const [eventId] = (await seedEvents(t.pool, 1, {
      fanned: true,
      scope: "acme",
      type: "supplier.connected",
    })) as [string];
    const id = await delivery(endpointId, "pending", [503, null], {
      eventId,
      lastError: "no answer: timeout",
    });
    // The first attempt went to the URL the endpoint had before an operator changed it,
    // and its receiver asked for ten minutes.
    await t.pool.query(
      `UPDATE webhook_attempts SET url = CASE WHEN status = 503 THEN 'https://old.example/hook'
                                             ELSE 'https://hooks.example.com/acme' END,
              response_headers = CASE WHEN status = 503
                THEN '{"retry-after": "600", "content-type": "text/plain", "x-request-id": "rcv-7"}'::jsonb END
        WHERE delivery_id = $1`,
      [id],
    );

    const text = await runCli(["webhooks", "delivery", id], dbOnly());
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split("\n");
    expect(lines.slice(0, 3)).toEqual([
      `webhook delivery ${id}`,
      `  endpoint   https://hooks.example.com/acme (${endpointId})`,
      `  event      ${eventId} (supplier.connected, scope acme)`,
    ]);
    // Where it went is said only where that is not the endpoint's URL now.
    expect(lines).toContainEqual(
      expect.stringMatching(
        /^ {4}\S+Z {2}503 {2}12 ms {2}to https:\/\/old\.example\/hook {2}\(retry-after: 600, x-request-id: rcv-7\) {2}answered 503$/,
      ),
    );
    expect(lines).toContainEqual(expect.stringMatching(/^ {4}\S+Z {2}no answer \(timeout\) {2}12 ms$/));
    expect(lines.at(-1)).toBe('  body       {"type":"supplier.connected"}');

    const json = JSON.parse((await runCli(["webhooks", "delivery", id, "--json"], dbOnly())).stdout);
    expect(json).toMatchObject({
      id,
      endpointId,
      endpointUrl: "https://hooks.example.com/acme",
      status: "pending",
      body: '{"type":"supplier.connected"}',
      attempts: [
        { status: 503, error: null, durationMs: 12, url: "https://old.example/hook" },
        { status: null, error: "timeout", url: "https://hooks.example.com/acme" },
      ],
    });

    const event = await runCli(["events", "show", eventId], dbOnly());
    expect(event.stdout).toContain(
      `  webhooks\n    delivery ${id}, endpoint https://hooks.example.com/acme: pending, 2 attempts, next attempt not before `,
    );
    const eventJson = JSON.parse((await runCli(["events", "show", eventId, "--json"], dbOnly())).stdout);
    expect(eventJson.webhookDeliveries).toEqual([
      expect.objectContaining({
        id,
        endpointId,
        status: "pending",
        attempts: 2,
        lastError: "no answer: timeout",
      }),
    ]);
    expect(eventJson.webhookDeliveries[0]).not.toHaveProperty("attemptLog");
  });

  it("an event with no delivery says whether no endpoint takes it or its fan-out job has not run", async () => {
    const [waiting, untaken, later] = (await seedEvents(t.pool, 3, {
      fanned: true,
      scope: "acme",
      type: "supplier.connected",
    })) as [string, string, string];
    // The relay published each event's webhook.fanout job; QStash has not run them.
    await t.pool.query(
      `UPDATE events SET fanout = jsonb_build_object('webhook.fanout', jsonb_build_object('messageId', 'msg_' || seq)),
                         fanned_out_at = now() - interval '1 minute'`,
    );
    await t.pool.query("UPDATE events SET type = 'corpus.note.created' WHERE id = $1", [untaken]);
    await t.pool.query("UPDATE events SET fanned_out_at = now() - interval '2 hours' WHERE id = $1", [later]);
    // Takes supplier.* of scope acme, made an hour ago: after `later` was fanned out.
    const { id: endpointId } = await endpoint();
    await t.pool.query(
      "UPDATE webhook_endpoints SET types = ARRAY['supplier.*'], created_at = now() - interval '1 hour' WHERE id = $1",
      [endpointId],
    );
    const webhooksLine = async (id: string) =>
      (await runCli(["events", "show", id], dbOnly())).stdout
        .split("\n")
        .find((l) => l.startsWith("  webhooks"));
    // It said nothing at all: a backlog of fan-out jobs read as "no deliveries".
    expect(await webhooksLine(waiting)).toMatch(
      /^ {2}webhooks {3}none yet: 1 enabled endpoint of its scope takes its type, and its webhook\.fanout job \(msg_\d+\) has not made the deliveries: QStash still holds it/,
    );
    expect(await webhooksLine(untaken)).toBe(
      "  webhooks   none: no enabled endpoint of its scope takes its type",
    );
    // An endpoint made after the event's fan-out was never owed its deliveries.
    expect(await webhooksLine(later)).toBe(
      "  webhooks   none: no enabled endpoint of its scope takes its type",
    );
    expect(await webhooksLine(waiting)).toMatch(
      /QStash still holds it \(a backlog of fan-out jobs waits behind their flow-control limit, or its attempts fail\)$/,
    );
    // With the sweep's reading of the fan-out jobs' wait list, it says how many wait.
    await t.pool.query(
      `INSERT INTO subscription_wait_lists
              (subscription, waiting, parallelism, in_flight, paused, waiting_since, checked_at)
       VALUES ('webhook.fanout', 93012, 10, 10, false, now() - interval '20 minutes', '2026-12-06T12:20:00Z')`,
    );
    // A reading from before the event's job was sent says nothing of it.
    expect(await webhooksLine(waiting)).toMatch(/QStash still holds it \(a backlog of fan-out jobs/);
    await t.pool.query("UPDATE subscription_wait_lists SET checked_at = date_trunc('second', now())");
    const { rows } = await t.pool.query("SELECT checked_at FROM subscription_wait_lists");
    const checkedAt = (rows[0] as { checked_at: Date }).checked_at.toISOString();
    const seqOf = async (id: string) =>
      ((await t.pool.query("SELECT seq FROM events WHERE id = $1", [id])).rows[0] as { seq: string }).seq;
    expect(await webhooksLine(waiting)).toBe(
      "  webhooks   none yet: 1 enabled endpoint of its scope takes its type, and its webhook.fanout job " +
        `(msg_${await seqOf(waiting)}) has not made the deliveries: QStash still holds it (93012 webhook.fanout jobs ` +
        `waited behind their flow-control limit when the sweep read QStash at ${checkedAt})`,
    );
    // Under its job in the fan-out, as for every subscription whose jobs wait.
    const shown = (await runCli(["events", "show", waiting], dbOnly())).stdout;
    expect(shown).toContain(
      `    webhook.fanout: msg_${await seqOf(waiting)}\n      may still wait in QStash: 93012 webhook.fanout jobs waited`,
    );
    const asJson = JSON.parse((await runCli(["events", "show", waiting, "--json"], dbOnly())).stdout);
    expect(asJson.jobsWaiting).toEqual([
      { subscription: "webhook.fanout", waiting: 93012, paused: false, checkedAt },
    ]);
    await t.pool.query("DELETE FROM subscription_wait_lists");
    const json = JSON.parse((await runCli(["events", "show", waiting, "--json"], dbOnly())).stdout);
    expect(json.webhooksNote).toMatch(/^none yet: /);
  });

  it("counts an attempt whose Worker stopped before recording it, in every view, and says so", async () => {
    const { id: endpointId } = await endpoint();
    const [eventId] = (await seedEvents(t.pool, 1, { fanned: true, scope: "acme" })) as [string];
    const id = await delivery(endpointId, "failed", [], { eventId, lastError: "retries exhausted" });
    // The lease counted the attempt; the Worker was killed before it wrote the attempt's row.
    await t.pool.query("UPDATE webhook_deliveries SET attempts = 1 WHERE id = $1", [id]);
    const shown = (await runCli(["webhooks", "delivery", id], dbOnly())).stdout;
    // It said "after 0 attempts" and "(none yet)" here, and "after 1 attempt" in the list.
    expect(shown).toMatch(/ {2}status {5}failed \S+ after 1 attempt: retries exhausted\n/);
    expect(shown).toContain(
      "  attempts\n    (1 attempt left no record: the Worker stopped during it, and the receiver may have got the POST)\n",
    );
    expect(shown).not.toContain("none yet");
    const json = JSON.parse((await runCli(["webhooks", "delivery", id, "--json"], dbOnly())).stdout);
    expect(json).toMatchObject({ attemptsMade: 1, attempts: [] });
    const list = (await runCli(["webhooks", "show", endpointId, "--status", "failed"], dbOnly())).stdout;
    expect(list).toContain("after 1 attempt: retries exhausted");
    expect(json.attemptInProgress).toBe(false);

    // An attempt holding the lease is waiting for the receiver, not lost.
    await t.pool.query(
      "UPDATE webhook_deliveries SET status = 'pending', failed_at = NULL, lease_until = now() + interval '50 seconds' WHERE id = $1",
      [id],
    );
    const going = (await runCli(["webhooks", "delivery", id], dbOnly())).stdout;
    expect(going).toContain("  attempts\n    (1 attempt in progress: the receiver has not answered yet)\n");
    const goingJson = JSON.parse((await runCli(["webhooks", "delivery", id, "--json"], dbOnly())).stdout);
    expect(goingJson).toMatchObject({ attemptsMade: 1, attemptInProgress: true, attempts: [] });
  });

  it("stats counts the deliveries not attempted yet, which QStash holds behind each endpoint's limit", async () => {
    expect((await runCli(["stats"], dbOnly())).stdout).toMatch(/^webhooks waiting {3}none$/m);
    const [a, b] = [await endpoint(), await endpoint({ url: "https://hooks.example.com/other" })];
    await delivery(a.id, "pending", [], { createdAt: "2026-12-06T12:00:00Z" });
    await delivery(a.id, "pending");
    await delivery(b.id, "pending");
    // Attempted once already (its retry waits in QStash on its own schedule), or finished: not counted.
    await delivery(b.id, "pending", [503]);
    await delivery(b.id, "delivered", [200]);
    const text = (await runCli(["stats"], dbOnly())).stdout;
    expect(text).toMatch(
      /^webhooks waiting {3}3 deliveries to 2 endpoints not attempted yet, the oldest created 2026-12-06T12:00:00\.000Z \(webhooks list: each endpoint's pending\)$/m,
    );
    const json = JSON.parse((await runCli(["stats", "--json"], dbOnly())).stdout);
    expect(json.webhookDeliveriesWaiting).toEqual({
      deliveries: 3,
      endpoints: 2,
      oldestSince: "2026-12-06T12:00:00.000Z",
    });
  });

  it("says what is unknown or malformed, before the database for a malformed id", async () => {
    const unknown = "7d0c5d8e-3a52-4d4e-9c51-0f3f4b0e2f11";
    const missing = await runCli(["webhooks", "delivery", unknown, "--json"], dbOnly());
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stdout)).toEqual({
      error: { code: "not_found", message: `webhook delivery ${unknown} not found` },
    });
    const noEndpoint = await runCli(["webhooks", "show", unknown], dbOnly());
    expect(noEndpoint.code).toBe(1);
    expect(noEndpoint.stderr.trim()).toBe(`edge-outbox: webhook endpoint ${unknown} not found`);

    // No DATABASE_URL: a malformed id is said before anything needs it.
    const malformed = await runCli(["webhooks", "show", "acme-erp", "--json"]);
    expect(malformed.code).toBe(2);
    expect(JSON.parse(malformed.stdout)).toEqual({
      error: { code: "invalid_input", message: '"acme-erp" is not a webhook endpoint id (a UUID)' },
    });
    const cases: [string[], RegExp][] = [
      [
        ["webhooks"],
        /webhooks needs a command: list, show, delivery, redeliver, recover, test, enable or disable/,
      ],
      [["webhooks", "retry"], /unknown webhooks command "retry"/],
      [["webhooks", "list", "x"], /webhooks list takes no argument, got "x"/],
      [["webhooks", "show"], /webhooks show takes one webhook endpoint id/],
      [["webhooks", "redeliver", unknown, unknown], /webhooks redeliver takes one webhook delivery id/],
      [
        ["webhooks", "show", unknown, "--status", "gone"],
        /--status must be pending, delivered or failed, got "gone"/,
      ],
      [
        ["webhooks", "show", unknown, "--limit", "201"],
        /--limit must be an integer from 1 to 200, got "201"/,
      ],
      [["webhooks", "recover", unknown], /webhooks recover needs --since <time>/],
      [
        ["webhooks", "show", unknown, "--since", "2026-12-01T00:00:00Z"],
        /--since is not an option of webhooks show/,
      ],
      [
        ["webhooks", "recover", unknown, "--since", "2026-12-01T00:00:00Z", "--status", "failed"],
        /--status is not an option of webhooks recover/,
      ],
      [
        ["webhooks", "recover", unknown, "--since", "yesterday"],
        /--since must be an ISO 8601 time .*, got "yesterday"/,
      ],
    ];
    await expectUsageErrors(cases);
    // Fourteen CLI processes, eleven at once, each ~1.5 s of CPU to start: on two
    // shared cores under the rest of the suite they took past the default 30 s.
  }, 120_000);
});

describe("outbox webhooks: what an operator fixes", () => {
  it("redelivers one delivery as a new deliver job, same body, with the deployment's label", async () => {
    const { id: endpointId } = await endpoint();
    const id = await delivery(endpointId, "failed", [500], { lastError: "endpoint answered 500" });

    const r = await runCli(["webhooks", "redeliver", id, "--json"], withQStash());
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ deliveryId: id });
    const [job, ...others] = deliverJobs();
    expect(others).toEqual([]);
    expect(JSON.parse(job!.body)).toEqual({ deliveryId: id });
    // Labelled as the Worker labels its jobs, so the sweep's dead-letter reading finds it (ADR 0027).
    const held = await fetch(`${paused.qstash.url}/v2/messages/${job!.messageId}`, {
      headers: { authorization: `Bearer ${paused.qstash.token}` },
    });
    expect(((await held.json()) as { labels?: string[] }).labels).toEqual(["edge-outbox-127-0-0-1-8787"]);
    // The Worker's retry schedule, as the deliver jobs it publishes carry it.
    expect(job!.maxRetries).toBe(7);
    expect(await deliveryRow(id)).toEqual({
      status: "pending",
      failed_at: null,
      message_id: job!.messageId,
      last_error: null,
    });

    const text = await runCli(["webhooks", "redeliver", id], withQStash());
    expect(text.stdout.trim()).toBe(`delivery ${id}: a new deliver job is queued (same body and webhook-id)`);
    expect(deliverJobs()).toHaveLength(2);
  });

  it("sends a test event to that endpoint only, as a delivery whose attempts the CLI then shows", async () => {
    const target = await endpoint({ url: "https://hooks.example.com/target" });
    const sibling = await endpoint({ url: "https://hooks.example.com/sibling" });

    const r = await runCli(["webhooks", "test", target.id, "--json"], withQStash());
    expect(r.code).toBe(0);
    const { deliveryId, eventId } = JSON.parse(r.stdout) as { deliveryId: string; eventId: string };
    const [job, ...others] = deliverJobs();
    expect(others).toEqual([]);
    expect(JSON.parse(job!.body)).toEqual({ deliveryId });
    const shown = JSON.parse((await runCli(["webhooks", "delivery", deliveryId, "--json"], dbOnly())).stdout);
    expect(shown).toMatchObject({
      endpointId: target.id,
      eventId,
      eventType: "webhook.test",
      scope: "acme",
      status: "pending",
      attempts: [],
    });
    expect(JSON.parse(shown.body)).toMatchObject({
      type: "webhook.test",
      data: { id: eventId, subject: target.id },
    });
    const { rows } = await t.pool.query(
      `SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1`,
      [sibling.id],
    );
    expect(rows[0].n).toBe(0);

    const text = await runCli(["webhooks", "test", target.id], withQStash());
    expect(text.stdout.trim()).toMatch(
      new RegExp(
        `^webhook\\.test queued for webhook endpoint ${target.id} as delivery ([0-9a-f-]{36}); ` +
          `its attempts: npm run outbox -- webhooks delivery \\1$`,
      ),
    );
  });

  it("recovers every delivery that gave up or waits for a retry since a time, a batch per publish, with progress", async () => {
    const { id: endpointId } = await endpoint();
    const before = await delivery(endpointId, "failed", [500], { createdAt: "2026-01-01T00:00:00Z" });
    const delivered = await delivery(endpointId, "delivered", [200]);
    // Its retry 30 minutes away: sent now.
    const retrying = await delivery(endpointId, "pending", [503]);
    // Never attempted yet, queued behind the endpoint's deliveries in flight: left queued.
    const queued = await delivery(endpointId, "pending");
    // One more than a recover re-sends per publish (RECOVER_BATCH), so it takes two.
    await t.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, event_type, scope, body, status, attempts, failed_at)
       SELECT $1, gen_random_uuid(), 'supplier.connected', 'acme', '{}', 'failed', 8, now()
         FROM generate_series(1, 501)`,
      [endpointId],
    );

    const r = await runCli(
      ["webhooks", "recover", endpointId, "--since", "2026-06-01T00:00:00+02:00"],
      withQStash(),
    );
    expect(r.code).toBe(0);
    expect(r.stderr.trim()).toBe("re-sent 500 so far…");
    expect(r.stdout.trim()).toBe(
      `re-sent 502 deliveries (501 that gave up, 1 waiting for a retry) of webhook endpoint ${endpointId}`,
    );
    expect(deliverJobs()).toHaveLength(502);
    const { rows } = await t.pool.query(
      `SELECT status, count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 GROUP BY status ORDER BY status`,
      [endpointId],
    );
    expect(rows).toEqual([
      { status: "delivered", n: 1 },
      { status: "failed", n: 1 },
      { status: "pending", n: 503 },
    ]);
    expect((await deliveryRow(retrying)).message_id).not.toBeNull();
    expect((await deliveryRow(queued)).message_id).toBeNull();
    expect((await deliveryRow(before)).status).toBe("failed");
    expect((await deliveryRow(delivered)).status).toBe("delivered");

    const again = await runCli(
      ["webhooks", "recover", endpointId, "--since", "2026-06-01T00:00:00Z", "--json"],
      withQStash(),
    );
    expect(JSON.parse(again.stdout)).toEqual({ recovered: 0, retrying: 0 });
  });

  it("disables and enables an endpoint; a disabled one is refused a re-send, and nothing is published", async () => {
    const { id: endpointId } = await endpoint();
    const id = await delivery(endpointId, "failed", [500]);

    const off = await runCli(["webhooks", "disable", endpointId], dbOnly());
    expect(off.stdout.trim()).toBe(
      `webhook endpoint ${endpointId} is disabled (disabled by an operator); it gets no new deliveries, ` +
        `and those pending fail without a request (once enabled, webhooks recover ${endpointId} sends them again)`,
    );
    // Said again, it says so, and keeps the first reason.
    expect((await runCli(["webhooks", "disable", endpointId], dbOnly())).stdout).toMatch(
      new RegExp(`^webhook endpoint ${endpointId} is already disabled \\(disabled by an operator\\);`),
    );
    const refused = await runCli(["webhooks", "redeliver", id, "--json"], withQStash());
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.stdout).error).toEqual({
      code: "illegal_transition",
      message: `cannot redeliver to webhook endpoint ${endpointId}: it is disabled; enable it first`,
    });
    const recover = await runCli(
      ["webhooks", "recover", endpointId, "--since", "2026-01-01T00:00:00Z"],
      withQStash(),
    );
    const test = await runCli(["webhooks", "test", endpointId], withQStash());
    expect(test.code).toBe(1);
    expect(test.stderr).toMatch(
      /cannot send a test event to webhook endpoint .*: it is disabled; enable it first/,
    );
    expect(recover.code).toBe(1);
    expect(recover.stderr).toMatch(
      /cannot recover deliveries of webhook endpoint .*: it is disabled; enable it first/,
    );
    expect(deliverJobs()).toEqual([]);
    expect((await deliveryRow(id)).status).toBe("failed");

    const on = await runCli(["webhooks", "enable", endpointId, "--json"], dbOnly());
    expect(JSON.parse(on.stdout)).toMatchObject({
      id: endpointId,
      enabled: true,
      disabledReason: null,
      disabledAt: null,
    });
    expect((await runCli(["webhooks", "list"], dbOnly())).stdout).toMatch(
      new RegExp(`${endpointId}.*healthy`),
    );
    // Enabled again, it says the events of the gap are skipped for good, not only
    // that its failed deliveries wait for recover.
    expect((await runCli(["webhooks", "disable", endpointId], dbOnly())).code).toBe(0);
    expect((await runCli(["webhooks", "enable", endpointId], dbOnly())).stdout).toMatch(
      /; events recorded while it was disabled made no delivery for it\n?$/,
    );
    const already = (await runCli(["webhooks", "enable", endpointId], dbOnly())).stdout;
    expect(already).toMatch(new RegExp(`^webhook endpoint ${endpointId} is already enabled;`));
    expect(already).not.toContain("made no delivery");
    expect((await runCli(["webhooks", "redeliver", id], withQStash())).code).toBe(0);
    expect(deliverJobs()).toHaveLength(1);
  });

  it("a publish QStash refuses exits 1 and puts the delivery back as it was; no QStash variables, exit 2", async () => {
    const { id: endpointId } = await endpoint();
    const id = await delivery(endpointId, "failed", [500], { lastError: "endpoint answered 500" });
    const wasBefore = await deliveryRow(id);

    paused.qstash.failNextPublishes(1, 500);
    const r = await runCli(["webhooks", "redeliver", id], withQStash());
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toMatch(
      new RegExp(
        `edge-outbox: QStash did not take the deliver job \\(QStash 500: .*\\); nothing changed for delivery ${id}: try again$`,
      ),
    );
    expect(await deliveryRow(id)).toEqual(wasBefore);

    const unset = await runCli(["webhooks", "redeliver", id], dbOnly());
    expect(unset.code).toBe(2);
    expect(unset.stderr).toMatch(/QSTASH_TOKEN is not set/);
    expect(await deliveryRow(id)).toEqual(wasBefore);
  });

  // Run with no QSTASH_URL, the re-send went to Upstash's QStash; offline, "try again"
  // could only fail the same way. (Asked of the CLI's refusal itself: the CLI run so
  // would send a request to Upstash.)
  it("a re-send QStash did not take, with QSTASH_URL unset, names the URL it went to", () => {
    const unreachable = new PublishError("QStash unreachable: TypeError: fetch failed", "outage");
    const refuse = (env: NodeJS.ProcessEnv) =>
      refusedUnpublished((error, advice) => notQueuedMessage("delivery d1", error, advice), env)(unreachable);
    expect(() => refuse({ QSTASH_TOKEN: "t" })).toThrow(
      "QStash did not take the deliver job (QStash unreachable: TypeError: fetch failed); " +
        "nothing changed for delivery d1: QSTASH_URL is not set, so this went to https://qstash.upstash.io: " +
        "if the Worker's QStash is another (npm run dev prints its own), set QSTASH_URL to it; if not, try again",
    );
    // Blank is unset, as the Worker reads it; one that is set gets the Worker's advice alone.
    expect(() => refuse({ QSTASH_URL: " " })).toThrow("QSTASH_URL is not set, so this went to");
    expect(() => refuse({ QSTASH_URL: "http://127.0.0.1:1" })).toThrow(
      /^QStash did not take the deliver job \(.*\); nothing changed for delivery d1: try again$/,
    );
  });
});
