import type pg from "pg";
import { defineSubscriptions, type Subscription } from "../../src/outbox/index.ts";

/** Puts a test file's database back to an empty outbox between tests. */
export async function resetOutbox(pool: pg.Pool): Promise<void> {
  await pool.query(
    `TRUNCATE events, outbox_alerts, corpus_notes, suppliers, subscription_wait_lists RESTART IDENTITY`,
  );
  await pool.query(
    `UPDATE outbox_relay_state SET failures = 0, backoff_until = NULL, last_error = NULL, last_failure_at = NULL`,
  );
}

export const everything: Subscription[] = defineSubscriptions([{ name: "all", types: ["*"] }]);
