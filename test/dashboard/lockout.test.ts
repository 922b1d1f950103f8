import { describe, expect, it } from "vitest";
import { clientAddress, LOCKOUT_POLICY, lockedUntil } from "../../src/worker/dashboard/lockout.ts";

const T0 = Date.parse("2026-12-03T08:00:00Z");
const at = (minutes: number) => new Date(T0 + minutes * 60_000);

describe("lockedUntil", () => {
  it("locks for 10 minutes from the fifth failure within 10 minutes", () => {
    const failures = [0, 1, 2, 3, 4].map(at);
    expect(LOCKOUT_POLICY).toEqual({ maxFailures: 5, windowMs: 600_000, lockMs: 600_000 });
    expect(lockedUntil(failures.slice(0, 4), at(4))).toBeNull();
    expect(lockedUntil(failures, at(4))).toEqual(at(14));
    expect(lockedUntil(failures, at(13.9))).toEqual(at(14));
    expect(lockedUntil(failures, at(14))).toBeNull();
  });

  it("does not lock five failures spread over more than the window", () => {
    expect(lockedUntil([0, 3, 6, 9, 10.5].map(at), at(10.5))).toBeNull();
    // …but the next failure within the window of the second does.
    expect(lockedUntil([0, 3, 6, 9, 10.5, 12].map(at), at(12))).toEqual(at(22));
  });
});

describe("clientAddress", () => {
  const of = (value: string | undefined) =>
    clientAddress((name) => (name === "CF-Connecting-IP" ? value : undefined), "https://outbox.example.com");

  it("counts an IPv4 address as itself, in one spelling", () => {
    expect(of("203.0.113.7")).toBe("203.0.113.7");
    expect(of(" 203.0.113.7 ")).toBe("203.0.113.7");
    expect(of("203.000.113.007")).toBe("203.0.113.7");
  });

  it("counts IPv6 addresses by their /64, whatever their spelling", () => {
    const bucket = "2001:db8:1:2::/64";
    for (const address of ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:DB8:1:2:0:0:0:9"]) {
      expect(of(address), address).toBe(bucket);
    }
    expect(of("2001:db8:1:3::1")).not.toBe(bucket);
  });

  it("takes no address on a local Worker, where a client can set the header itself", () => {
    // wrangler dev passes a client's CF-Connecting-IP through: a fresh one per guess.
    for (const url of ["http://127.0.0.1:8787", "http://localhost:8787", "http://[::1]:8787"]) {
      expect(
        clientAddress(() => "203.0.113.7", url),
        url,
      ).toBe("local");
    }
  });

  it("puts anything that is not an address in the shared bucket, not a fresh one", () => {
    for (const value of [
      undefined,
      "",
      "7.7.7.7, 1",
      "attacker-1",
      "999.1.1.1",
      "1.2.3",
      "2001:db8::1::2",
      "[::1]",
    ]) {
      expect(of(value), String(value)).toBe("unknown");
    }
  });
});
