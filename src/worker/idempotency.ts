import { sha256Hex } from "../domain/text.ts";
import { ApiError } from "./errors.ts";

/** The longest Idempotency-Key taken (Stripe's limit; a UUID is 36). */
export const IDEMPOTENCY_KEY_MAX = 255;

const RULE = `Idempotency-Key must be 1 to ${IDEMPOTENCY_KEY_MAX} visible ASCII characters, bare or as a quoted string ("…"), e.g. a UUID`;

/**
 * Reads the `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header):
 * undefined when there is none. The draft makes it a structured-field string,
 * `"…"` with `\"` and `\\` escapes; most clients send the value bare (Stripe's
 * convention), so both are taken. Anything else is a 400 before the write runs:
 * a key read wrongly would not protect the retry its caller counts on. Two keys
 * (the header twice) arrive joined by ", " and are refused, saying so.
 */
export function parseIdempotencyKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  // Whitespace around a field value is not part of it (RFC 9110 §5.5). Fetch's Headers
  // trims it, but workerd hands a request's trailing spaces through, and `key   ` was a 400.
  header = header.replace(/^[ \t]+|[ \t]+$/g, "");
  const key = oneKey(header);
  if (key !== undefined) return key;
  // The header sent more than once arrives joined by ", ": each value may be a good
  // key, and "must be visible ASCII characters" named no fault the caller could see.
  // When only some of the values are keys, both faults are said: the generic rule alone
  // hid that the header went out twice.
  const values = header.split(/[ \t]*,[ \t]*/);
  const keys = values.filter((v) => oneKey(v) !== undefined).length;
  if (values.length > 1 && keys > 0) {
    const twice = `Idempotency-Key was sent ${values.length} times`;
    throw new ApiError(
      "BAD_REQUEST",
      keys === values.length ? `${twice}: send it once` : `${twice}, not all of them keys: send one; ${RULE}`,
      [{ path: "header.idempotency-key", message: `sent ${values.length} times` }],
    );
  }
  throw new ApiError("BAD_REQUEST", RULE, [
    {
      path: "header.idempotency-key",
      message: `must be 1 to ${IDEMPOTENCY_KEY_MAX} visible ASCII characters`,
    },
  ]);
}

/** The key one header value holds, or undefined when it is not one. */
function oneKey(value: string): string | undefined {
  const key = value.startsWith('"') ? unquoted(value) : value;
  if (key === undefined || key.length === 0 || key.length > IDEMPOTENCY_KEY_MAX || !visible(key, value))
    return undefined;
  return key;
}

/** A bare key has no spaces or quotes; a quoted one may hold spaces (RFC 8941 §3.3.3). */
function visible(key: string, header: string): boolean {
  return header.startsWith('"')
    ? /^[\x20-\x7e]+$/.test(key)
    : /^[\x21-\x7e]+$/.test(key) && !key.includes('"');
}

/** An RFC 8941 sf-string's content; undefined when it is not one (unclosed, a stray quote or escape, text after it). */
function unquoted(header: string): string | undefined {
  let out = "";
  for (let i = 1; i < header.length; i++) {
    const ch = header[i]!;
    if (ch === "\\") {
      const next = header[++i];
      if (next !== '"' && next !== "\\") return undefined;
      out += next;
    } else if (ch === '"') {
      return i === header.length - 1 ? out : undefined;
    } else {
      out += ch;
    }
  }
  return undefined;
}

/**
 * What a request asked for, as a repeat must ask it: its method, its path with any
 * UUID in it lower-cased (a UUID is case-insensitive, and the database takes
 * `/notes/1F8B…` for the note `1f8b…`; other segments are left alone, since a
 * route of one's own may tell cases apart) and its body as validated (so the same
 * JSON spaced or ordered differently is the same request), hashed. `Prefer` is
 * not part of it: waiting or not, it is one write.
 */
export async function fingerprintOf(method: string, path: string, input: unknown): Promise<string> {
  const canonical = path.replace(UUID_SEGMENT, (id) => id.toLowerCase());
  return sha256Hex(`${method} ${canonical}\n${JSON.stringify(input ?? null)}`);
}

/** A path segment that is a UUID, in any case. */
const UUID_SEGMENT = /(?<=\/)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?=\/|$)/gi;
