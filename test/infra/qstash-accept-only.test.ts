// The accept-only endpoint reads a batch's messages from the bytes (batchDestinations)
// instead of parsing the body: it must answer one id per message, in order, for any
// JSON array of messages, and refuse what is not one, as when it parsed.
import { Client } from "@upstash/qstash";
import { createQStashDeadLetters } from "../../src/domain/job-failures/dead-letters.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  batchDestinations,
  startAcceptOnlyQStash,
  type AcceptOnlyQStash,
} from "../../infra/qstash-accept-only.ts";

const read = (text: string) => batchDestinations(Buffer.from(text, "utf8"));
/** What a full JSON reading says: each element's own destination, "" where it has none. */
const parsed = (value: unknown[]) =>
  value.map((m) => {
    const d = (m as { destination?: unknown }).destination;
    return typeof d === "string" ? d : "";
  });

describe("batchDestinations", () => {
  it("reads each message's destination, in order, as JSON.parse would, whatever the strings hold", () => {
    const messages = [
      {
        destination: "https://a.example/jobs/mail",
        headers: { "Upstash-Deduplication-Id": "e1-mail" },
        body: "{}",
      },
      // Strings holding what would end a message, open one, or look like a key.
      {
        destination: "https://b.example/jobs/x",
        body: JSON.stringify({ list: [{ destination: "not this" }, { a: "]}" }], q: '"\\', u: "é ☃ \u0001" }),
      },
      {
        headers: { destination: "nested, not this" },
        body: '{"destination":"inside a body"}',
        destination: "https://c.example/last-key",
      },
      { body: "a message without a destination" },
      {
        destination: 'https://d.example/with"quote\\and\u00e9',
        n: 1.5e3,
        t: true,
        z: null,
        arr: [1, [2, { x: "y" }]],
      },
    ];
    for (const text of [
      JSON.stringify(messages),
      JSON.stringify(messages, null, 2),
      ` \n${JSON.stringify(messages)}\t`,
    ]) {
      expect(read(text)).toEqual(parsed(messages));
    }
    expect(read("[]")).toEqual([]);
    expect(read(" [ ] ")).toEqual([]);
  });

  it("refuses a body that is not a JSON array of objects", () => {
    for (const text of [
      "",
      "{}",
      '"[]"',
      "[1, 2]",
      '["a"]',
      "[[]]",
      '[{"destination":"a"}',
      '[{"destination":"a}]',
      '[{"destination":"a"}]]',
      '[{"destination":"a"}] x',
      '[{"destination":"a"}}]',
    ]) {
      expect(read(text), text).toBeUndefined();
    }
  });
});

describe("the accept-only endpoint", () => {
  let accept: AcceptOnlyQStash;
  beforeAll(async () => {
    accept = await startAcceptOnlyQStash();
  });
  afterAll(() => accept.close());

  it("answers the SDK's batch with one message id per message, in order, with its url", async () => {
    const client = new Client({
      baseUrl: accept.url,
      token: accept.token,
      retry: false,
      devMode: false,
      enableTelemetry: false,
    });
    const urls = [
      "https://a.example/jobs/one",
      'https://b.example/jobs/two?x="1"',
      "https://c.example/jobs/three",
    ];
    const answers = await client.batch(
      urls.map((url, i) => ({ url, body: JSON.stringify({ i, s: '"]},{' }) })),
    );
    const answered = answers as { messageId: string; url: string }[];
    expect(answered.map((a) => a.url)).toEqual(urls);
    expect(new Set(answered.map((a) => a.messageId)).size).toBe(3);
    expect(accept.stats()).toMatchObject({ requests: 1, messages: 3 });
  });

  it("answers the sweep's dead-letter listing with an empty queue, and nothing else it does not know", async () => {
    const dlq = createQStashDeadLetters({ baseUrl: accept.url, token: accept.token });
    const before = accept.stats().requests;
    expect(await dlq.list({ label: "edge-outbox-a.example" }, 100)).toEqual({ letters: [] });
    // Publishes are what `requests` counts.
    expect(accept.stats().requests).toBe(before);
    const other = await fetch(`${accept.url}/v2/messages/msg_1`, {
      headers: { authorization: `Bearer ${accept.token}` },
    });
    expect(other.status).toBe(405);
  });

  it("reads a body that arrives in many chunks, larger than its buffer, and then a small one", async () => {
    const post = async (count: number) => {
      const messages = Array.from({ length: count }, (_, i) => ({
        destination: `https://a.example/jobs/${i}`,
        body: JSON.stringify({ i, pad: "x".repeat(400) }),
      }));
      const response = await fetch(`${accept.url}/v2/batch`, {
        method: "POST",
        headers: { authorization: `Bearer ${accept.token}`, "content-type": "application/json" },
        body: JSON.stringify(messages),
      });
      expect(response.status).toBe(200);
      const answers = (await response.json()) as { url: string }[];
      expect(answers.map((a) => a.url)).toEqual(messages.map((m) => m.destination));
    };
    accept.reset();
    await post(1_400); // ~700 KB: many socket reads, and past the 256 KB kept for joining them
    await post(2);
    expect(accept.stats()).toMatchObject({ requests: 2, messages: 1_402 });
  });

  it("refuses a batch body that is not a JSON array of messages with 400", async () => {
    for (const body of ['{"destination":"a"}', '[{"destination":"a"}', "[1]"]) {
      const response = await fetch(`${accept.url}/v2/batch`, {
        method: "POST",
        headers: { authorization: `Bearer ${accept.token}`, "content-type": "application/json" },
        body,
      });
      expect(response.status, body).toBe(400);
      await response.body?.cancel();
    }
  });
});
