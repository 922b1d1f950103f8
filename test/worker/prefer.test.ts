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
    // delta-seconds has no length limit (RFC 9111 §1.2.2: a value too large to hold is read as a large one).
    expect(parseWait("wait=9999999999")).toBe(MAX_WAIT_SECONDS);
    expect(parseWait(`wait=${"9".repeat(400)}`)).toBe(MAX_WAIT_SECONDS);
    expect(parseWait("wait=007")).toBe(7);
  });

  it("says what it takes when it refuses", () => {
    expect(() => parseWait("wait=soon")).toThrow(
      `Prefer: wait must be a whole number of seconds (more than ${MAX_WAIT_SECONDS} waits ${MAX_WAIT_SECONDS}), got "soon"`,
    );
  });

  it("rejects values that are not delta-seconds", () => {
    for (const bad of [
      "wait=soon",
      "wait=-1",
      "wait=1.5",
      "wait=",
      "wait",
      "respond-async, WAIT",
      "wait=1e3",
      "wait= 5x",
      "wait=0x10",
    ]) {
      expect(() => parseWait(bad), bad).toThrow(ApiError);
    }
  });
});
