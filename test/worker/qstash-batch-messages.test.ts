// QSTASH_BATCH_MESSAGES (ADR 0025): how many messages one QStash batch request
// carries, for the relay's jobs and the webhooks' deliver jobs alike, so a
// deployment whose QStash refuses large batches can lower it without a code change.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startAcceptOnlyQStash, type AcceptOnlyQStash } from "../../infra/qstash-accept-only.ts";
import type { Job } from "../../src/outbox/index.ts";
import { parseConfig, type Config } from "../../src/worker/env.ts";
import { publisherFor } from "../../src/worker/relay.ts";
import { deliverQueueFor } from "../../src/worker/webhooks.ts";
import { bindings } from "../support/worker.ts";

let accept: AcceptOnlyQStash;
beforeAll(async () => {
  accept = await startAcceptOnlyQStash();
});
afterAll(async () => {
  await accept?.close();
});
beforeEach(() => accept.reset());

function configWith(value: string | undefined): Config {
  const parsed = parseConfig(
    bindings({
      QSTASH_URL: accept.url,
      QSTASH_TOKEN: accept.token,
      ...(value === undefined ? {} : { QSTASH_BATCH_MESSAGES: value }),
    }),
  );
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.config;
}

const jobs = (n: number): Job[] =>
  Array.from({ length: n }, (_, i) => ({
    subscription: "corpus.index",
    deduplicationId: `0190b6d2-7a1e-7cc0-8000-${String(i).padStart(12, "0")}:corpus.index`,
    json: `{"subscription":"corpus.index","event":{"n":${i}},"coalesced":[]}`,
    body: undefined as never,
  }));

describe("QSTASH_BATCH_MESSAGES", () => {
  it("defaults to 500 and takes whole numbers from 1 to 1000", () => {
    expect(configWith(undefined).QSTASH_BATCH_MESSAGES).toBe(500);
    expect(configWith(" ").QSTASH_BATCH_MESSAGES).toBe(500);
    expect(configWith("100").QSTASH_BATCH_MESSAGES).toBe(100);
    const problems: [string, string][] = [
      ["0", "must be at least 1 message"],
      ["2.5", "must be a whole number of messages"],
      ["1001", "must be at most 1000 messages"],
      ["lots", "must be a whole number of messages"],
    ];
    for (const [value, message] of problems) {
      expect(parseConfig(bindings({ QSTASH_BATCH_MESSAGES: value }))).toEqual({
        ok: false,
        message: `Worker misconfigured: binding QSTASH_BATCH_MESSAGES ${message}`,
      });
    }
  });

  it("bounds the relay's batch requests: 600 jobs are 2 requests by default, 6 with 100", async () => {
    const signal = new AbortController().signal;
    const ids = await publisherFor(configWith(undefined)).publish(jobs(600), signal);
    expect(ids).toHaveLength(600);
    expect(accept.stats()).toMatchObject({ requests: 2, messages: 600 });

    accept.reset();
    await publisherFor(configWith("100")).publish(jobs(600), signal);
    expect(accept.stats()).toMatchObject({ requests: 6, messages: 600 });
  });

  it("bounds the webhooks' deliver requests the same way", async () => {
    const deliveries = (n: number) =>
      Array.from({ length: n }, (_, i) => ({
        deliveryId: `d${i}`,
        endpointId: crypto.randomUUID(),
        deduplicationId: `e:${i}`,
      }));
    expect(await deliverQueueFor(configWith(undefined)).enqueue(deliveries(501))).toHaveLength(501);
    expect(accept.stats()).toMatchObject({ requests: 2, messages: 501 });

    accept.reset();
    await deliverQueueFor(configWith("250")).enqueue(deliveries(501));
    expect(accept.stats()).toMatchObject({ requests: 3, messages: 501 });
  });
});
