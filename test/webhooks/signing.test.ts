import { createHmac } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { newSecret, signHeaders } from "../../src/domain/webhooks/signing.ts";

// Checked with the independent `standardwebhooks` package, never with our own signer.
describe("Standard Webhooks signing", () => {
  const body = JSON.stringify({
    type: "corpus.note.updated",
    timestamp: "2026-12-02T20:00:00.000Z",
    data: {},
  });
  const id = "0193a6f0-7d2e-7c1a-9b1e-2f1f6a3c9d10";
  const now = () => Math.floor(Date.now() / 1000);

  it("produces headers the reference verifier accepts", async () => {
    const secret = newSecret();
    const headers = await signHeaders({ id, timestamp: now(), body, secrets: [secret] });
    expect(headers["webhook-id"]).toBe(id);
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
  });

  it("secrets are whsec_ and at least 24 random bytes", () => {
    const secret = newSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(atob(secret.slice("whsec_".length)).length).toBeGreaterThanOrEqual(24);
    expect(newSecret()).not.toBe(secret);
  });

  it("during a rotation the header verifies with the old secret and with the new one", async () => {
    const [current, previous] = [newSecret(), newSecret()];
    const headers = await signHeaders({ id, timestamp: now(), body, secrets: [current, previous] });
    expect(headers["webhook-signature"].split(" ")).toHaveLength(2);
    expect(() => new Webhook(current).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(previous).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(newSecret()).verify(body, headers)).toThrow();
  });

  it('verifies by hand as README "Delivery" describes it, for a receiver in another language', async () => {
    const secret = newSecret();
    const timestamp = now();
    const headers = await signHeaders({ id, timestamp, body, secrets: [secret] });
    const signed = `${id}.${timestamp}.${body}`;
    const mac = (key: Buffer | string) => `v1,${createHmac("sha256", key).update(signed).digest("base64")}`;
    // Keyed with the decoded bytes after whsec_: the one that matches.
    const bytes = Buffer.from(secret.slice("whsec_".length), "base64");
    expect(headers["webhook-signature"]).toBe(mac(bytes));
    // The mistakes the README warns about: keyed with the text, whole or after the prefix.
    expect(headers["webhook-signature"]).not.toBe(mac(secret));
    expect(headers["webhook-signature"]).not.toBe(mac(secret.slice("whsec_".length)));
  });

  it("a changed body or a stale timestamp does not verify", async () => {
    const secret = newSecret();
    const fresh = await signHeaders({ id, timestamp: now(), body, secrets: [secret] });
    expect(() => new Webhook(secret).verify(body + " ", fresh)).toThrow();
    const stale = await signHeaders({ id, timestamp: now() - 3600, body, secrets: [secret] });
    expect(() => new Webhook(secret).verify(body, stale)).toThrow();
  });
});
