import { Receiver } from "@upstash/qstash";
import { afterEach, describe, expect, it, vi } from "vitest";
import { signJwt } from "../../infra/qstash-dev/server.ts";
import { useQStashDev } from "./harness.ts";

const t = useQStashDev({ currentSigningKey: "sig_current_test_key", nextSigningKey: "sig_next_test_key" });

afterEach(() => {
  vi.useRealTimers();
  t.dev.setSignWithNextKey(false);
});

/** Publishes one message and returns what the destination received. */
async function deliverOne(path = "/signed", body: unknown = { order: 42 }) {
  const res = await t.client.publishJSON({ url: t.receiver.url(path), body });
  await t.dev.waitForSettled(res.messageId);
  const got = t.receiver.received.find((r) => r.headers["upstash-message-id"] === res.messageId)!;
  return { signature: String(got.headers["upstash-signature"]), body: got.body, url: t.receiver.url(path) };
}

const receiverWith = (current: string, next: string) =>
  new Receiver({ currentSigningKey: current, nextSigningKey: next });

describe("Upstash-Signature verified by the real Receiver", () => {
  it("is a valid HS256 JWT over the body and URL, signed with the current key", async () => {
    const delivered = await deliverOne();
    await expect(receiverWith("sig_current_test_key", "unrelated").verify(delivered)).resolves.toBe(true);
    const [header, payload] = delivered.signature
      .split(".")
      .slice(0, 2)
      .map((p) => JSON.parse(Buffer.from(p, "base64url").toString()));
    expect(header).toEqual({ alg: "HS256", typ: "JWT" });
    expect(payload).toMatchObject({ iss: "Upstash", sub: delivered.url, jti: expect.any(String) });
    expect(payload.exp - payload.iat).toBe(300);
    expect(payload.nbf).toBe(payload.iat);
    // Not signed with the next key while no rotation is configured:
    await expect(receiverWith("unrelated", "unrelated2").verify(delivered)).rejects.toThrow();
  });

  it("with rotation on, signs with the next key, which the Receiver accepts as its fallback", async () => {
    t.dev.setSignWithNextKey(true);
    const delivered = await deliverOne();
    await expect(receiverWith("sig_next_test_key", "unrelated").verify(delivered)).resolves.toBe(true);
    await expect(receiverWith("sig_current_test_key", "sig_next_test_key").verify(delivered)).resolves.toBe(
      true,
    );
    await expect(receiverWith("sig_current_test_key", "unrelated").verify(delivered)).rejects.toThrow();
  });

  it("rejects an expired token (older than 5 minutes)", async () => {
    const delivered = await deliverOne();
    // Same key twice, so the error we see is the current key's (the Receiver reports the fallback's).
    const receiver = receiverWith("sig_current_test_key", "sig_current_test_key");
    await expect(receiver.verify(delivered)).resolves.toBe(true);
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now() + 5 * 60_000 + 2_000);
    await expect(receiver.verify(delivered)).rejects.toThrow(/exp/);
  });

  it("rejects a token minted in the past even with the right key", async () => {
    const body = '{"a":1}';
    const url = "http://127.0.0.1:9/x";
    const old = signJwt({
      key: "sig_current_test_key",
      url,
      body: Buffer.from(body),
      now: Date.now() / 1000 - 301,
    });
    const fresh = signJwt({ key: "sig_current_test_key", url, body: Buffer.from(body) });
    const receiver = receiverWith("sig_current_test_key", "sig_next_test_key");
    await expect(receiver.verify({ signature: old, body, url })).rejects.toThrow();
    await expect(receiver.verify({ signature: fresh, body, url })).resolves.toBe(true);
  });

  it("rejects a wrong sub (URL) and a tampered body", async () => {
    const delivered = await deliverOne();
    const receiver = receiverWith("sig_current_test_key", "sig_next_test_key");
    await expect(receiver.verify({ ...delivered, url: t.receiver.url("/other") })).rejects.toThrow(/subject/);
    await expect(receiver.verify({ ...delivered, body: delivered.body.replace("42", "43") })).rejects.toThrow(
      /body/,
    );
    const [h, p, s] = delivered.signature.split(".");
    const forged = `${h}.${p}.${s!.slice(0, -2)}AA`;
    await expect(receiver.verify({ ...delivered, signature: forged })).rejects.toThrow();
  });

  it("hashes the raw bytes, so non-ASCII bodies verify", async () => {
    const delivered = await deliverOne("/utf8", { name: "Zoë – 東京 🚀" });
    await expect(receiverWith("sig_current_test_key", "x").verify(delivered)).resolves.toBe(true);
  });
});
