import { HttpError } from "./http-util.ts";

/**
 * `Upstash-Retry-Delay` expressions (retry docs): arithmetic over the variable
 * `retried` (retries so far, starting from 0) with pow, sqrt, abs, exp, floor,
 * ceil, round, min, max; the result is the delay in milliseconds. Parsed once at
 * publish (a bad expression is a 400), evaluated per retry. No eval(): a small
 * recursive-descent parser over + - * / ( ) and calls.
 */
export type RetryDelayExpression = (retried: number) => number;

type Node = (retried: number) => number;

const FUNCTIONS: Record<string, { arity: [number, number]; fn: (...args: number[]) => number }> = {
  pow: { arity: [2, 2], fn: (a, b) => Math.pow(a!, b!) },
  sqrt: { arity: [1, 1], fn: (a) => Math.sqrt(a!) },
  abs: { arity: [1, 1], fn: (a) => Math.abs(a!) },
  exp: { arity: [1, 1], fn: (a) => Math.exp(a!) },
  floor: { arity: [1, 1], fn: (a) => Math.floor(a!) },
  ceil: { arity: [1, 1], fn: (a) => Math.ceil(a!) },
  round: { arity: [1, 1], fn: (a) => Math.round(a!) },
  min: { arity: [1, Infinity], fn: (...args) => Math.min(...args) },
  max: { arity: [1, Infinity], fn: (...args) => Math.max(...args) },
};

export function parseRetryDelayExpression(source: string): RetryDelayExpression {
  const tokens = source.match(/\d+(?:\.\d+)?|[A-Za-z_]\w*|[-+*/(),]|\S/g) ?? [];
  let pos = 0;
  const fail = (why: string): never => {
    throw new HttpError(400, `invalid upstash-retry-delay ${JSON.stringify(source)}: ${why}`);
  };
  const peek = () => tokens[pos];
  const take = (expected?: string) => {
    const token = tokens[pos];
    if (token === undefined || (expected !== undefined && token !== expected)) {
      fail(`expected ${expected ?? "more input"} at ${JSON.stringify(token ?? "end")}`);
    }
    pos += 1;
    return token!;
  };

  const primary = (): Node => {
    const token = take();
    if (/^\d/.test(token)) {
      const value = Number(token);
      return () => value;
    }
    if (token === "(") {
      const inner = sum();
      take(")");
      return inner;
    }
    if (token === "-") {
      const operand = primary();
      return (r) => -operand(r);
    }
    if (token === "retried") return (r) => r;
    const fn = FUNCTIONS[token];
    if (!fn) return fail(`unknown name ${JSON.stringify(token)}`);
    take("(");
    const args: Node[] = [];
    if (peek() !== ")") {
      args.push(sum());
      while (peek() === ",") {
        take(",");
        args.push(sum());
      }
    }
    take(")");
    if (args.length < fn.arity[0] || args.length > fn.arity[1]) fail(`wrong number of arguments to ${token}`);
    return (r) => fn.fn(...args.map((arg) => arg(r)));
  };
  const product = (): Node => {
    let left = primary();
    while (peek() === "*" || peek() === "/") {
      const op = take();
      const l = left;
      const right = primary();
      left = op === "*" ? (r) => l(r) * right(r) : (r) => l(r) / right(r);
    }
    return left;
  };
  const sum = (): Node => {
    let left = product();
    while (peek() === "+" || peek() === "-") {
      const op = take();
      const l = left;
      const right = product();
      left = op === "+" ? (r) => l(r) + right(r) : (r) => l(r) - right(r);
    }
    return left;
  };

  if (tokens.length === 0) fail("empty");
  const root = sum();
  if (pos !== tokens.length) fail(`unexpected ${JSON.stringify(tokens[pos])}`);
  return root;
}
