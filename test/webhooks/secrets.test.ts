import { describe, expect, it } from "vitest";
import {
  importSecretsKey,
  newSecretsKey,
  sealSecret,
  SecretBoxError,
} from "../../src/domain/webhooks/secret-box.ts";
import { signingSecrets } from "../../src/domain/webhooks/secrets.ts";
import { newSecret } from "../../src/domain/webhooks/signing.ts";

const id = "6f1c2f7e-3d7b-4a52-9f7e-0c1d2e3f4a5b";
const now = new Date("2026-12-03T08:00:00Z");
const hours = (n: number) => new Date(now.getTime() + n * 3_600_000);

describe("signingSecrets", () => {
  it("opens the current secret alone when there is no previous one", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const current = newSecret();
    const row = {
      id,
      secretBox: await sealSecret(key, current, id),
      previousSecretBox: null,
      previousSecretExpiresAt: null,
    };
    expect(await signingSecrets(key, row, now)).toEqual([current]);
  });

  it("keeps the previous secret, after the current one, only while its window is open", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const [current, previous] = [newSecret(), newSecret()];
    const row = {
      id,
      secretBox: await sealSecret(key, current, id),
      previousSecretBox: await sealSecret(key, previous, id),
      previousSecretExpiresAt: hours(24),
    };
    expect(await signingSecrets(key, row, now)).toEqual([current, previous]);
    expect(await signingSecrets(key, row, hours(23.9))).toEqual([current, previous]);
    expect(await signingSecrets(key, row, hours(24))).toEqual([current]);
    expect(await signingSecrets(key, row, hours(48))).toEqual([current]);
  });

  it("refuses a box sealed for another endpoint", async () => {
    const key = await importSecretsKey(newSecretsKey());
    const row = {
      id,
      secretBox: await sealSecret(key, newSecret(), "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"),
      previousSecretBox: null,
      previousSecretExpiresAt: null,
    };
    await expect(signingSecrets(key, row, now)).rejects.toThrow(SecretBoxError);
  });

  it("says a box that does not open may have been sealed under another WEBHOOK_SECRETS_KEY, and what fixes it", async () => {
    // A changed key failed every delivery with "secret box does not open with this key
    // and endpoint", which named no binding (the config walkthrough).
    const [before, after] = [
      await importSecretsKey(newSecretsKey()),
      await importSecretsKey(newSecretsKey()),
    ];
    const row = {
      id,
      secretBox: await sealSecret(before, newSecret(), id),
      previousSecretBox: null,
      previousSecretExpiresAt: null,
    };
    await expect(signingSecrets(after, row, now)).rejects.toThrow(
      `webhook endpoint ${id}'s signing secret does not open with WEBHOOK_SECRETS_KEY: was the key changed since ` +
        "the secret was sealed? Put the old key back, or rotate the endpoint's secret (its receiver then needs the new one)",
    );
  });

  it("signs with the current secret alone when the previous one was sealed under a key since replaced", async () => {
    // After a changed key, a rotation seals the new secret under the new key and keeps the
    // old box as the previous one, which that key cannot open: every delivery failed for
    // the rotation's 24 h window, until a second rotation.
    const [before, after] = [
      await importSecretsKey(newSecretsKey()),
      await importSecretsKey(newSecretsKey()),
    ];
    const current = newSecret();
    const row = {
      id,
      secretBox: await sealSecret(after, current, id),
      previousSecretBox: await sealSecret(before, newSecret(), id),
      previousSecretExpiresAt: hours(24),
    };
    expect(await signingSecrets(after, row, now)).toEqual([current]);
  });
});
