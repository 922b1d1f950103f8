import { describe, expect, it } from "vitest";
import { ApiError } from "../../src/worker/errors.ts";
import { MAX_WAIT_SECONDS, parseWait } from "../../src/worker/prefer.ts";

describe("Prefer: wait=N (RFC 7240)", () => {
  it("reads delta-seconds among other preferences, quoted or with parameters", () => {
    expect(parseWait(undefined)).toBeUndefined();
    expect(parseWait("return=minimal")).toBeUndefined();
    expect(parseWait("wait=5")).toBe(5);
    expect(parseWait("respond-async, wait=3")).toBe(3);
    expect(parseWait('WAIT="7"; foo=bar')).toBe(7);
    expect(parseWait("wait=0")).toBe(0);
  });

  it("clamps long waits to the maximum", () => {
    expect(parseWait("wait=60")).toBe(MAX_WAIT_SECONDS);
    expect(parseWait("wait=999999999")).toBe(MAX_WAIT_SECONDS);
  });

  it("rejects values that are not delta-seconds", () => {
    for (const bad of ["wait=soon", "wait=-1", "wait=1.5", "wait=", "wait=1e3", "wait=9999999999"]) {
      expect(() => parseWait(bad), bad).toThrow(ApiError);
    }
  });
});
