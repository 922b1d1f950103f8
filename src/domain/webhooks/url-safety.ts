/**
 * Which URLs an endpoint may point at. An endpoint URL is chosen by whoever holds
 * the operator token, and the Worker POSTs to it with its own network position:
 * a URL naming a loopback, private or cloud-metadata address would turn webhook
 * delivery into a request forger (SSRF). So, unless WEBHOOK_ALLOW_PRIVATE_URLS is
 * set (the local stack, where receivers live on 127.0.0.1), only https URLs to
 * public names and public IP literals are accepted.
 *
 * The check runs on what the WHATWG URL parser makes of the input, because that is
 * what fetch() will connect to: it already folds `2130706433`, `0x7f000001`,
 * `0177.0.0.1` and `127.1` into `127.0.0.1`, and `[::ffff:127.0.0.1]` into
 * `[::ffff:7f00:1]`, so each address form is classified once, numerically.
 * What no string check can see (a public name that resolves to a private address)
 * is discussed in docs/adr/0006-webhook-endpoints.md.
 */

export interface UrlPolicy {
  /** WEBHOOK_ALLOW_PRIVATE_URLS: http and private/loopback addresses allowed (local development). */
  allowPrivate: boolean;
}

export type UrlVerdict = { ok: true; url: string } | { ok: false; reason: string };

const MAX_LENGTH = 2048;

/** Returns the normalised URL (what is stored and fetched), or why it is refused. */
export function checkWebhookUrl(input: string, policy: UrlPolicy): UrlVerdict {
  if (input.length > MAX_LENGTH) return refuse(`must be at most ${MAX_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return refuse("must be an absolute URL, e.g. https://example.com/webhooks");
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return refuse(policy.allowPrivate ? "must use http or https" : "must use https");
  }
  if (url.protocol === "http:" && !policy.allowPrivate) {
    return refuse("must use https (http is allowed only with WEBHOOK_ALLOW_PRIVATE_URLS=true)");
  }
  // An empty `user:@` still parses to empty credentials; refuse any userinfo at all,
  // since a receiver would log it and a reader would mistake the host.
  if (url.username || url.password || /^[a-z][a-z0-9+.-]*:\/*[^/?#\\]*@/i.test(input.trim())) {
    return refuse("must not contain credentials (user:password@)");
  }
  if (policy.allowPrivate) return { ok: true, url: url.href };

  const host = url.hostname;
  if (host.startsWith("[")) {
    const groups = parseIpv6(host.slice(1, -1));
    const problem = groups ? ipv6Problem(groups) : "is an IPv6 address that could not be read";
    return problem ? refuse(`${problem} (${host})`) : { ok: true, url: url.href };
  }
  const v4 = parseIpv4(host);
  if (v4 !== undefined) {
    const problem = ipv4Problem(v4);
    return problem ? refuse(`${problem} (${host})`) : { ok: true, url: url.href };
  }
  const problem = nameProblem(host);
  return problem ? refuse(`${problem} (${host})`) : { ok: true, url: url.href };
}

/**
 * Whether WEBHOOK_ALLOW_PRIVATE_URLS is on where it does harm: a Worker whose own
 * PUBLIC_URL is a public https address is deployed, and there the setting lets any
 * endpoint point at private addresses and keeps 2 KB of each answer for an operator
 * to read. Not refused outright: a local stack reached through a public tunnel (for
 * a real QStash) has the same shape. The dashboard's overview says so instead.
 */
export function privateUrlsWhereDeployed(config: {
  WEBHOOK_ALLOW_PRIVATE_URLS: boolean;
  PUBLIC_URL: string;
}): boolean {
  return config.WEBHOOK_ALLOW_PRIVATE_URLS && checkWebhookUrl(config.PUBLIC_URL, { allowPrivate: false }).ok;
}

function refuse(reason: string): UrlVerdict {
  return { ok: false, reason };
}

// Names that resolve to the machine itself or only inside a private network:
// RFC 6761 (localhost), RFC 6762 (.local, mDNS), ICANN's reserved .internal,
// RFC 8375 (.home.arpa). Cloud metadata names (metadata.google.internal) fall under .internal.
const privateSuffixes = ["localhost", "local", "internal", "home.arpa", "localdomain"];

function nameProblem(hostname: string): string | undefined {
  // A trailing dot is the same name, fully qualified: `localhost.` is localhost.
  const name = hostname.replace(/\.+$/, "");
  if (name === "") return "must name a host";
  for (const suffix of privateSuffixes) {
    if (name === suffix || name.endsWith(`.${suffix}`)) {
      return `must not name a local or internal host (.${suffix})`;
    }
  }
  // A name of one label (`metadata`, `instance-data`, `kubernetes`) is found through a
  // resolver's search domains, which only a private network has: no public receiver
  // is reached that way.
  if (!name.includes(".")) return "must name a host by its full domain name, not one label";
  return undefined;
}

/** The URL parser serialises every IPv4 host as four decimal octets; anything else is a name. */
export function parseIpv4(host: string): number | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return undefined;
  const octets = m.slice(1).map(Number);
  if (octets.some((o) => o > 255)) return undefined;
  return ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
}

interface Range4 {
  base: number;
  bits: number;
  problem: string;
}

const v4 = (a: number, b: number, c: number, d: number) => ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;

// Order matters: the first match names the problem, so the narrow ranges
// (metadata, broadcast) come before the ranges that contain them.
const ipv4Ranges: Range4[] = [
  { base: v4(169, 254, 169, 254), bits: 32, problem: "must not point at a cloud metadata address" },
  { base: v4(100, 100, 100, 200), bits: 32, problem: "must not point at a cloud metadata address" },
  { base: v4(255, 255, 255, 255), bits: 32, problem: "must not point at the broadcast address" },
  { base: v4(0, 0, 0, 0), bits: 8, problem: "must not point at an unspecified address" },
  { base: v4(127, 0, 0, 0), bits: 8, problem: "must not point at a loopback address" },
  { base: v4(10, 0, 0, 0), bits: 8, problem: "must not point at a private address" },
  { base: v4(172, 16, 0, 0), bits: 12, problem: "must not point at a private address" },
  { base: v4(192, 168, 0, 0), bits: 16, problem: "must not point at a private address" },
  { base: v4(169, 254, 0, 0), bits: 16, problem: "must not point at a link-local address" },
  { base: v4(100, 64, 0, 0), bits: 10, problem: "must not point at a carrier-grade NAT address" },
  { base: v4(224, 0, 0, 0), bits: 4, problem: "must not point at a multicast address" },
  { base: v4(240, 0, 0, 0), bits: 4, problem: "must not point at a reserved address" },
  { base: v4(192, 0, 0, 0), bits: 24, problem: "must not point at a reserved address" },
  // The 6to4 relays' anycast block (RFC 7526 deprecated it): whoever runs the nearest relay.
  { base: v4(192, 88, 99, 0), bits: 24, problem: "must not point at a reserved address" },
  { base: v4(198, 18, 0, 0), bits: 15, problem: "must not point at a reserved address" },
  { base: v4(192, 0, 2, 0), bits: 24, problem: "must not point at a documentation address" },
  { base: v4(198, 51, 100, 0), bits: 24, problem: "must not point at a documentation address" },
  { base: v4(203, 0, 113, 0), bits: 24, problem: "must not point at a documentation address" },
];

function ipv4Problem(address: number): string | undefined {
  for (const range of ipv4Ranges) {
    const mask = range.bits === 0 ? 0 : (0xffffffff << (32 - range.bits)) >>> 0;
    if ((address & mask) >>> 0 === range.base) return range.problem;
  }
  return undefined;
}

/** Eight 16-bit groups, from the parser's compressed hex form (it never emits dotted IPv4 inside). */
export function parseIpv6(text: string): number[] | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const read = (part: string | undefined) => (part ? part.split(":") : []);
  const head = read(halves[0]);
  const tail = read(halves[1]);
  const fill = 8 - head.length - tail.length;
  if (halves.length === 1 ? fill !== 0 : fill < 1) return undefined;
  const parts = [...head, ...Array<string>(halves.length === 2 ? fill : 0).fill("0"), ...tail];
  const groups = parts.map((p) => (/^[0-9a-f]{1,4}$/i.test(p) ? parseInt(p, 16) : NaN));
  return groups.some(Number.isNaN) ? undefined : groups;
}

function ipv6Problem(g: number[]): string | undefined {
  const [g0, g1, g2, g3, g4, g5, g6, g7] = g as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const embedded = (g6 << 16) | g7;
  const zeroTo = (n: number) => g.slice(0, n).every((x) => x === 0);

  if (zeroTo(8)) return "must not point at an unspecified address";
  if (zeroTo(7) && g7 === 1) return "must not point at a loopback address";
  // The forms that carry an IPv4 address inside: judged by that address, since a
  // dual-stack host connects to it. ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d
  // (translated), ::a.b.c.d (compatible, deprecated), 64:ff9b::a.b.c.d (NAT64).
  const mapped = zeroTo(5) && g5 === 0xffff;
  const translated = zeroTo(4) && g4 === 0xffff && g5 === 0;
  const compatible = zeroTo(6);
  const nat64 = g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0;
  if (mapped || translated || compatible || nat64) {
    const problem = ipv4Problem(embedded >>> 0);
    const form = nat64
      ? "NAT64"
      : mapped
        ? "IPv4-mapped"
        : translated
          ? "IPv4-translated"
          : "IPv4-compatible";
    return problem ? `${problem}, as an ${form} IPv6 address` : undefined;
  }
  // 6to4 (2002:a.b.c.d::/48) routes to the IPv4 address in its second and third groups.
  if (g0 === 0x2002) {
    const problem = ipv4Problem(((g1 << 16) | g2) >>> 0);
    if (problem) return `${problem}, as a 6to4 IPv6 address`;
  }
  // Teredo (2001::/32) carries its client's IPv4 address inverted in the last two
  // groups, and its server's in the second and third: any of them may be private, and
  // no webhook receiver is reached through a tunnel Windows stopped using.
  if (g0 === 0x2001 && g1 === 0) return "must not point at a Teredo tunnel address";
  // AWS's IPv6 instance metadata service sits inside the ULA range: named first.
  if (g0 === 0xfd00 && g1 === 0x0ec2 && g.slice(2, 7).every((x) => x === 0) && g7 === 0x254) {
    return "must not point at a cloud metadata address";
  }
  if ((g0 & 0xfe00) === 0xfc00) return "must not point at a unique local (private) address";
  if ((g0 & 0xffc0) === 0xfe80) return "must not point at a link-local address";
  if ((g0 & 0xffc0) === 0xfec0) return "must not point at a site-local (private) address";
  if ((g0 & 0xff00) === 0xff00) return "must not point at a multicast address";
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return "must not point at a local-use NAT64 address";
  if (g0 === 0x0100 && g1 === 0 && g2 === 0 && g3 === 0) return "must not point at a discard-only address";
  if (g0 === 0x2001 && g1 === 0x0db8) return "must not point at a documentation address";
  return undefined;
}
