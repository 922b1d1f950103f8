import { expect, it } from "vitest";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";
import { useWorkerd } from "../support/workerd.ts";

// The mistake the canary is there for, in the real Worker bundle: signing keys that
// are not the QStash account's. Every job answers 401 while writes, /healthz and
// every view stay healthy; the canary turns that into an alert that says 401.
const t = useTestDatabase();
const stack = useWorkerd(t, {
  QSTASH_CURRENT_SIGNING_KEY: "sig_of_another_account_current",
  QSTASH_NEXT_SIGNING_KEY: "sig_of_another_account_next",
});

async function sweep(): Promise<void> {
  const res = await stack.fetch("/__scheduled?cron=*+*+*+*+*");
  expect(res.status).toBe(200);
  await res.text();
}

it("with signing keys of another account, the canary's 401 becomes a jobs.not_arriving alert", async () => {
  const canaryLetters = () =>
    stack.qstash.messages().filter((m) => m.url.endsWith("/jobs/_canary") && m.state === "ERROR").length;
  await sweep();
  await waitFor(() => canaryLetters() === 1, 10_000);
  // Five minutes on, moved rather than waited: another canary, refused the same way.
  await t.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '5 minutes'");
  await sweep();
  await waitFor(() => canaryLetters() === 2, 10_000);
  // A minute later, two in a row have not arrived.
  await t.pool.query("UPDATE qstash_canaries SET sent_at = sent_at - interval '1 minute'");
  await sweep();
  const { rows } = await t.pool.query(
    "SELECT message, details FROM outbox_alerts WHERE kind = 'jobs.not_arriving' AND resolved_at IS NULL",
  );
  expect(rows).toHaveLength(1);
  expect(rows[0].message).toMatch(
    new RegExp(
      `^jobs do not reach this Worker: no canary job the cron sweep sent through QStash to ${stack.url}/jobs/_canary ` +
        "since .+ UTC has arrived \\(2 sent, one every 5 min\\); none ever has\\. The Worker refused QStash's " +
        'signature \\(answered 401 \\{"error":\\{"code":"UNAUTHORIZED","message":"invalid Upstash-Signature".*\\): ' +
        "QSTASH_CURRENT_SIGNING_KEY and QSTASH_NEXT_SIGNING_KEY are not this QStash account's\\.",
    ),
  );
  expect(rows[0].details).toMatchObject({ canaries: 2, answer: expect.stringMatching(/^401 /) });
  // The health check has nothing to say of it: it answers for the database.
  expect((await stack.fetch("/healthz")).status).toBe(200);
});
