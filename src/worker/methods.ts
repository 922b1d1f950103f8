/**
 * Whether a request asks for something without changing anything (RFC 9110 §9.2.1's
 * safe methods as the routes see them: reads, and OPTIONS, which the router answers
 * with the methods a path takes). Each check that concerns only writes (`Prefer:
 * wait`, a query on a domain write, an operator's Idempotency-Key) asks this one
 * question: they had a list each, and two of the three took OPTIONS for a write, so
 * an OPTIONS with a malformed Prefer or an Idempotency-Key was refused 400 instead of
 * told the methods.
 */
export function isSafeMethod(method: string): boolean {
  return method === "GET" || method === "HEAD" || method === "OPTIONS";
}
