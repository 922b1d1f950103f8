import { describe, expect, it } from "vitest";
import { errorFingerprint } from "../../src/outbox/index.ts";

describe("errorFingerprint", () => {
  it.each([
    [
      "ids, quoted values and numbers",
      `QStash 400: event '7f3a' for subject "supplier-12" rejected after 3 tries (1.5 s)`,
      "QStash <n>: event <value> for subject <value> rejected after <n> tries (<n> s)",
    ],
    [
      "uuids, in or out of quotes",
      "note 4c1f1d2e-5d0a-4a7b-9d43-0E4A1C6A3B21 missing; see `9d43`",
      "note <id> missing; see <value>",
    ],
    ["hex message ids", "duplicate of msg 5f0c1e2d3a4b9c8d", "duplicate of msg <id>"],
    ["digits inside words are kept", "s3 upload via utf8 codec failed", "s3 upload via utf8 codec failed"],
    ["whitespace collapses", "  timed out\n\tafter   30 s ", "timed out after <n> s"],
    [
      "a JSON body's values, keeping its keys",
      `PublishError: QStash 400: {"error":"invalid destination"}`,
      `PublishError: QStash <n>: {"error":<value>}`,
    ],
    [
      "nested and spaced JSON, keys kept at every level",
      `QStash 422: { "error" : {"code": "E42", "detail":"bad"}, "ids": ["a", "b"] }`,
      `QStash <n>: { "error" : {"code": <value>, "detail":<value>}, "ids": [<value>, <value>] }`,
    ],
    [
      "a quoted value before a colon in prose, which is no key",
      `fetch "https://a.example/x": 503`,
      "fetch <value>: <n>",
    ],
  ])("normalises %s", (_, message, expected) => {
    expect(errorFingerprint(message)).toBe(expected);
  });

  it("gives rows that failed the same way one fingerprint, and different causes different ones", () => {
    const a = errorFingerprint(`payload for 11111111-1111-4111-8111-111111111111 is not JSON at position 17`);
    const b = errorFingerprint(
      `payload for 22222222-2222-4222-8222-222222222222 is not JSON at position 403`,
    );
    const c = errorFingerprint(`QStash 413: body too large`);
    expect(a).toBe(b);
    expect(a).not.toBe(c);
  });

  it("names a row with no error, and bounds the length", () => {
    expect(errorFingerprint(null)).toBe("(no error recorded)");
    expect(errorFingerprint("  ")).toBe("(no error recorded)");
    expect(errorFingerprint("x".repeat(1000))).toHaveLength(300);
  });
});
