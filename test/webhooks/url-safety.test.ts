import { describe, expect, it } from "vitest";
import { checkWebhookUrl } from "../../src/domain/webhooks/url-safety.ts";

const strict = { allowPrivate: false };
const relaxed = { allowPrivate: true };

// Each row: the URL as an operator might type it, and a fragment of the reason it
// is refused. The spellings are what an attacker would try; the URL parser folds
// many of them into one form, and the check must hold whatever it folds them into.
const refused: [string, RegExp][] = [
  // scheme and credentials
  ["http://example.com/hook", /must use https/],
  ["ftp://example.com/hook", /must use https/],
  ["javascript:alert(1)", /must use https/],
  ["not a url", /absolute URL/],
  ["/relative/path", /absolute URL/],
  ["https://user:pw@example.com/hook", /credentials/],
  ["https://user@example.com/hook", /credentials/],
  ["https://:@example.com/hook", /credentials/],
  ["https://@example.com/hook", /credentials/],
  [`https://example.com/${"a".repeat(2100)}`, /at most 2048/],
  // IPv4 loopback in every spelling
  ["https://127.0.0.1/hook", /loopback.*127\.0\.0\.1/],
  ["https://127.255.255.254/", /loopback/],
  ["https://2130706433/", /loopback.*127\.0\.0\.1/],
  ["https://0x7f000001/", /loopback/],
  ["https://0x7F.0x0.0x0.0x1/", /loopback/],
  ["https://0177.0.0.1/", /loopback/],
  ["https://017700000001/", /loopback/],
  ["https://127.1/", /loopback/],
  ["https://127.0.0.1./", /loopback/],
  ["https://127.0.0.1:8443/", /loopback/],
  // IPv4 private, link-local, CGNAT, multicast, unspecified, broadcast, metadata, reserved
  ["https://10.0.0.1/", /private/],
  ["https://172.16.0.1/", /private/],
  ["https://172.31.255.255/", /private/],
  ["https://192.168.1.1/", /private/],
  ["https://3232235777/", /private.*192\.168\.1\.1/],
  ["https://169.254.1.1/", /link-local/],
  ["https://169.254.169.254/latest/meta-data/", /metadata/],
  ["https://0xa9fea9fe/", /metadata/],
  ["https://100.100.100.200/", /metadata/],
  ["https://100.64.0.1/", /carrier-grade NAT/],
  ["https://100.127.255.255/", /carrier-grade NAT/],
  ["https://224.0.0.1/", /multicast/],
  ["https://239.255.255.250/", /multicast/],
  ["https://0.0.0.0/", /unspecified/],
  ["https://0/", /unspecified/],
  ["https://255.255.255.255/", /broadcast/],
  ["https://240.0.0.1/", /reserved/],
  ["https://192.0.0.170/", /reserved/],
  ["https://198.18.0.1/", /reserved/],
  ["https://192.0.2.1/", /documentation/],
  // IPv6
  ["https://[::1]/", /loopback/],
  ["https://[0:0:0:0:0:0:0:1]/", /loopback/],
  ["https://[::]/", /unspecified/],
  ["https://[::ffff:127.0.0.1]/", /loopback address, as an IPv4-mapped/],
  ["https://[::ffff:7f00:1]/", /loopback address, as an IPv4-mapped/],
  ["https://[0:0:0:0:0:ffff:7f00:1]/", /loopback address, as an IPv4-mapped/],
  ["https://[::ffff:10.1.2.3]/", /private address, as an IPv4-mapped/],
  ["https://[::ffff:a9fe:a9fe]/", /metadata address, as an IPv4-mapped/],
  ["https://[::ffff:0:7f00:1]/", /loopback address, as an IPv4-translated/],
  ["https://[::127.0.0.1]/", /loopback address, as an IPv4-compatible/],
  ["https://[::7f00:1]/", /loopback address, as an IPv4-compatible/],
  ["https://[64:ff9b::127.0.0.1]/", /loopback address, as an NAT64/],
  ["https://[64:ff9b:1::1]/", /local-use NAT64/],
  ["https://[2002:7f00:1::]/", /loopback address, as a 6to4/],
  ["https://[2002:c0a8:101::1]/", /private address, as a 6to4/],
  ["https://[fc00::1]/", /unique local/],
  ["https://[fd12:3456:789a::1]/", /unique local/],
  ["https://[fd00:ec2::254]/", /metadata/],
  ["https://[FD00:EC2:0:0:0:0:0:254]/", /metadata/],
  ["https://[fe80::1]/", /link-local/],
  ["https://[febf::1]/", /link-local/],
  ["https://[fec0::1]/", /site-local/],
  ["https://[ff02::1]/", /multicast/],
  ["https://[ff05::1:3]/", /multicast/],
  ["https://[100::1]/", /discard-only/],
  ["https://[2001:db8::1]/", /documentation/],
  // names
  ["https://localhost/", /local or internal host \(\.localhost\)/],
  ["https://LOCALHOST/", /\.localhost/],
  ["https://localhost./", /\.localhost/],
  ["https://%6c%6fcalhost/", /\.localhost/],
  ["https://ＬＯＣＡＬＨＯＳＴ/", /\.localhost/],
  ["https://api.localhost/", /\.localhost/],
  ["https://printer.local/", /\.local\)/],
  ["https://printer.local./", /\.local\)/],
  ["https://db.internal/", /\.internal/],
  ["https://metadata.google.internal/computeMetadata/v1/", /\.internal/],
  ["https://router.home.arpa/", /\.home\.arpa/],
  ["https://localhost.localdomain/", /\.localdomain/],
];

const accepted: [string, string][] = [
  ["https://example.com/webhooks", "https://example.com/webhooks"],
  ["HTTPS://Example.COM:443/Hook?x=1", "https://example.com/Hook?x=1"],
  ["https://hooks.example.com:8443/in", "https://hooks.example.com:8443/in"],
  ["https://93.184.216.34/hook", "https://93.184.216.34/hook"],
  ["https://1.1.1.1/", "https://1.1.1.1/"],
  ["https://172.32.0.1/", "https://172.32.0.1/"],
  ["https://100.128.0.1/", "https://100.128.0.1/"],
  ["https://[2606:4700:4700::1111]/", "https://[2606:4700:4700::1111]/"],
  ["https://[::ffff:8.8.8.8]/", "https://[::ffff:808:808]/"],
  ["https://[64:ff9b::8.8.8.8]/", "https://[64:ff9b::808:808]/"],
  // Lookalikes that are public names, not the reserved ones
  ["https://localhost.example.com/", "https://localhost.example.com/"],
  ["https://mylocal/", "https://mylocal/"],
  ["https://internal.example.com/", "https://internal.example.com/"],
];

describe("webhook URL safety (WEBHOOK_ALLOW_PRIVATE_URLS unset)", () => {
  it.each(refused)("refuses %s", (url, reason) => {
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
    ["ftp://127.0.0.1/", /must use https/],
    ["file:///etc/passwd", /must use https/],
    ["http://user:pw@127.0.0.1:4000/", /credentials/],
    ["https://token@example.com/", /credentials/],
    ["127.0.0.1:4000", /must use https|absolute URL/],
  ])("still refuses %s", (url, reason) => {
    const verdict = checkWebhookUrl(url, relaxed);
    expect(verdict.ok).toBe(false);
    if (!verdict.ok) expect(verdict.reason).toMatch(reason);
  });
});
