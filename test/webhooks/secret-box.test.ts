import { describe, expect, it } from "vitest";
import {
  importSecretsKey,
  newSecretsKey,
  openSecret,
  sealSecret,
  SecretBoxError,
} from "../../src/domain/webhooks/secret-box.ts";
import { newSecret } from "../../src/domain/webhooks/signing.ts";

const endpoint = "6f1c2f7e-3d7b-4a52-9f7e-0c1d2e3f4a5b";
const otherEndpoint = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

describe("endpoint secrets at rest", () => {
  it("round-trips a secret, and the box does not contain it", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const secret = newSecret();
    const box = await sealSecret(key, secret, endpoint);
    expect(box).toMatch(/^v1\.[A-Za-z0-9+/=]+\.[A-Za-z0-9+/=]+$/);
    expect(box).not.toContain(secret.slice("whsec_".length));
    expect(await openSecret(key, box, endpoint)).toBe(secret);
  });

  it("seals the same secret differently each time (fresh IV)", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const secret = newSecret();
    expect(await sealSecret(key, secret, endpoint)).not.toBe(await sealSecret(key, secret, endpoint));
  });

  it("does not open under another key, for another endpoint, or when tampered with", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const box = await sealSecret(key, newSecret(), endpoint);
    const otherKey = await importSecretsKey(newSecretsKey());
    await expect(openSecret(otherKey, box, endpoint)).rejects.toThrow(SecretBoxError);
    await expect(openSecret(key, box, otherEndpoint)).rejects.toThrow(SecretBoxError);
    const [v, iv, data] = box.split(".");
    const flipped = (data!.startsWith("A") ? "B" : "A") + data!.slice(1);
    await expect(openSecret(key, `${v}.${iv}.${flipped}`, endpoint)).rejects.toThrow(SecretBoxError);
    await expect(openSecret(key, "plain-text", endpoint)).rejects.toThrow(SecretBoxError);
  });

  it("refuses a key that is not base64 of 32 bytes", async () => {
    await expect(importSecretsKey("not base64!")).rejects.toThrow(/not base64/);
    await expect(importSecretsKey(btoa("too short"))).rejects.toThrow(/32 bytes/);
  });
});
