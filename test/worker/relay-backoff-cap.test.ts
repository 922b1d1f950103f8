import { beforeEach, describe, expect, it, vi } from "vitest";
import { parseConfig } from "../../src/worker/env.ts";
import { createScheduled } from "../../src/worker/scheduled.ts";
import { useTestDatabase } from "../support/db.ts";
import { seedEvents } from "../support/events.ts";
import { resetOutbox } from "../support/relay.ts";
import { bindings, executionContext, openTestPool } from "../support/worker.ts";

const t = useTestDatabase();
beforeEach(() => resetOutbox(t.pool));

describe("RELAY_BACKOFF_CAP_SECONDS", () => {
  it("defaults to the policy's minute and takes whole seconds up to an hour", () => {
    expect(parseConfig(bindings())).toMatchObject({ ok: true, config: { RELAY_BACKOFF_CAP_SECONDS: 60 } });
    expect(parseConfig(bindings({ RELAY_BACKOFF_CAP_SECONDS: " " }))).toMatchObject({
      ok: true,
      config: { RELAY_BACKOFF_CAP_SECONDS: 60 },
    });
    expect(parseConfig(bindings({ RELAY_BACKOFF_CAP_SECONDS: "6" }))).toMatchObject({
      ok: true,
      config: { RELAY_BACKOFF_CAP_SECONDS: 6 },
    });
    const problems: [string, string][] = [
      ["0", "must be at least 1 second"],
      ["1.5", "must be a whole number of seconds"],
      ["3601", "must be at most 3600 seconds (an hour)"],
      ["soon", "must be a whole number of seconds"],
    ];
    for (const [value, message] of problems) {
      expect(parseConfig(bindings({ RELAY_BACKOFF_CAP_SECONDS: value }))).toEqual({
        ok: false,
        message: `Worker misconfigured: binding RELAY_BACKOFF_CAP_SECONDS ${message}`,
      });
    }
  });

  // The Worker's own relay (the cron sweep here; kicks share passBackoffFor) against
  // a QStash that refuses every connection: the backoff doubles from 2 s and stops at
  // the binding's cap, as it stops at 60 s without it.
  async function sweepBackoffs(cap: string | undefined, sweeps: number): Promise<number[]> {
    await seedEvents(t.pool, 1);
    const pool = t.newPool(2);
    const open = openTestPool(pool);
    const env = bindings({
      DATABASE_URL: t.url,
      ...(cap === undefined ? {} : { RELAY_BACKOFF_CAP_SECONDS: cap }),
    });
    const log = vi.spyOn(console, "log").mockImplementation(() => undefined);
    // The SDK reports each refused publish; the recorded backoff is what this test reads.
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const waits: number[] = [];
    try {
      for (let i = 0; i < sweeps; i++) {
        await createScheduled(open)({} as ScheduledController, env, executionContext().ctx);
        const { rows } = await t.pool.query<{ wait: number }>(
          `SELECT extract(epoch FROM backoff_until - last_failure_at)::float AS wait FROM outbox_relay_state`,
        );
        waits.push(rows[0]!.wait);
        // The next sweep runs as if the wait were over; the failure count stays.
        await t.pool.query(`UPDATE outbox_relay_state SET backoff_until = now() - interval '1 second'`);
      }
    } finally {
      log.mockRestore();
      errors.mockRestore();
      await pool.end();
    }
    return waits;
  }

  it("caps the Worker relay's backoff during an outage, and nothing is charged to the row", async () => {
    expect(await sweepBackoffs("5", 4)).toEqual([2, 4, 5, 5]);
    const { rows } = await t.pool.query(`SELECT attempts, poisoned_at FROM events`);
    expect(rows).toEqual([{ attempts: 0, poisoned_at: null }]);
  });

  it("without the binding the cap is a minute", async () => {
    expect(await sweepBackoffs(undefined, 7)).toEqual([2, 4, 8, 16, 32, 60, 60]);
  });
});
