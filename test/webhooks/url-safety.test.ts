import { describe, expect, it } from "vitest";
import { checkWebhookUrl } from "../../src/domain/webhooks/url-safety.ts";
import { refusedUrls } from "./ssrf-cases.ts";

const strict = { allowPrivate: false };
const relaxed = { allowPrivate: true };

const accepted: [string, string][] = [
  ["https://example.com/webhooks", "https://example.com/webhooks"],
  ["HTTPS://Example.COM:443/Hook?x=1", "https://example.com/Hook?x=1"],
  ["https://hooks.example.com:8443/in", "https://hooks.example.com:8443/in"],
  ["https://93.184.216.34/hook", "https://93.184.216.34/hook"],
  ["https://1.1.1.1/", "https://1.1.1.1/"],
  ["https://172.32.0.1/", "https://172.32.0.1/"],
  ["https://100.128.0.1/", "https://100.128.0.1/"],
  // Just outside each refused IPv4 range (ssrf-cases.ts has each range's first and last).
  ["https://1.0.0.0/", "https://1.0.0.0/"],
  ["https://9.255.255.255/", "https://9.255.255.255/"],
  ["https://11.0.0.0/", "https://11.0.0.0/"],
  ["https://100.63.255.255/", "https://100.63.255.255/"],
  ["https://126.255.255.255/", "https://126.255.255.255/"],
  ["https://128.0.0.0/", "https://128.0.0.0/"],
  ["https://169.253.255.255/", "https://169.253.255.255/"],
  ["https://169.255.0.0/", "https://169.255.0.0/"],
  ["https://172.15.255.255/", "https://172.15.255.255/"],
  ["https://172.32.0.0/", "https://172.32.0.0/"],
  ["https://191.255.255.255/", "https://191.255.255.255/"],
  ["https://192.0.1.0/", "https://192.0.1.0/"],
  ["https://192.0.3.0/", "https://192.0.3.0/"],
  ["https://192.167.255.255/", "https://192.167.255.255/"],
  ["https://192.169.0.0/", "https://192.169.0.0/"],
  ["https://198.17.255.255/", "https://198.17.255.255/"],
  ["https://198.20.0.0/", "https://198.20.0.0/"],
  ["https://198.51.99.255/", "https://198.51.99.255/"],
  ["https://198.51.101.0/", "https://198.51.101.0/"],
  ["https://203.0.112.255/", "https://203.0.112.255/"],
  ["https://203.0.114.0/", "https://203.0.114.0/"],
  ["https://223.255.255.255/", "https://223.255.255.255/"],
  ["https://[2606:4700:4700::1111]/", "https://[2606:4700:4700::1111]/"],
  ["https://[::ffff:8.8.8.8]/", "https://[::ffff:808:808]/"],
  ["https://[64:ff9b::8.8.8.8]/", "https://[64:ff9b::808:808]/"],
  // Lookalikes that are public names, not the reserved ones
  ["https://localhost.example.com/", "https://localhost.example.com/"],
  ["https://mylocal.com/", "https://mylocal.com/"],
  // Just outside Teredo (2001::/32) and 192.88.99.0/24.
  ["https://[2001:1::1]/", "https://[2001:1::1]/"],
  ["https://192.88.98.255/", "https://192.88.98.255/"],
  ["https://192.88.100.0/", "https://192.88.100.0/"],
  ["https://internal.example.com/", "https://internal.example.com/"],
];

describe("webhook URL safety (WEBHOOK_ALLOW_PRIVATE_URLS unset)", () => {
  it.each(refusedUrls)("refuses %s", (url, reason) => {
    const verdict = checkWebhookUrl(url, strict);
    expect(verdict.ok).toBe(false);
    if (!verdict.ok) expect(verdict.reason).toMatch(reason);
  });

  it.each(accepted)("accepts %s as %s", (url, normalised) => {
    expect(checkWebhookUrl(url, strict)).toEqual({ ok: true, url: normalised });
  });
});

describe("webhook URL safety with WEBHOOK_ALLOW_PRIVATE_URLS=true", () => {
  it.each([
    "http://127.0.0.1:4000/webhooks",
    "http://localhost:3000/",
    "https://10.0.0.5/",
    "http://[::1]:8080/",
  ])("accepts the local receiver %s", (url) => {
    expect(checkWebhookUrl(url, relaxed).ok).toBe(true);
  });

  it.each([
    ["ftp://127.0.0.1/", /must use http or https/],
    ["file:///etc/passwd", /must use http or https/],
    ["http://user:pw@127.0.0.1:4000/", /credentials/],
    ["https://token@example.com/", /credentials/],
    ["127.0.0.1:4000", /absolute URL/],
  ])("still refuses %s", (url, reason) => {
    const verdict = checkWebhookUrl(url, relaxed);
    expect(verdict.ok).toBe(false);
    if (!verdict.ok) expect(verdict.reason).toMatch(reason);
  });
});
