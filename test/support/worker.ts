import { drizzle } from "drizzle-orm/node-postgres";
import type pg from "pg";
import type { Db } from "../../src/domain/db.ts";
import type { Queryable, SqlPool } from "../../src/outbox/index.ts";
import type { OpenDatabase } from "../../src/worker/database.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { createApp } from "../../src/worker/app.ts";
import type { App } from "../../src/worker/new-app.ts";
import type { TestDatabase } from "./db.ts";

/** The WEBHOOK_SECRETS_KEY of every test Worker (base64 of 32 bytes), so tests can open the boxes it seals. */
export const TEST_WEBHOOK_SECRETS_KEY = btoa(
  String.fromCharCode(...Array.from({ length: 32 }, (_, i) => i * 7 + 3)),
);

/** A complete, valid set of bindings; tests override or delete entries. */
export function bindings(overrides: Partial<Bindings> = {}): Bindings {
  return {
    DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
    // Writes kick the relay; with no QStash here, a refused connection fails the
    // kick at once (recorded as backoff) instead of waiting on an unreachable host.
    QSTASH_URL: "http://127.0.0.1:9",
    QSTASH_TOKEN: "test-qstash-token",
    QSTASH_CURRENT_SIGNING_KEY: "sig_current",
    QSTASH_NEXT_SIGNING_KEY: "sig_next",
    PUBLIC_URL: "http://127.0.0.1:8787",
    ADMIN_TOKEN: "admin-token-for-tests-0123456789",
    WEBHOOK_SECRETS_KEY: TEST_WEBHOOK_SECRETS_KEY,
    // Set by the global set-up when the test Postgres refuses a pipelined connect.
    ...(process.env.NEON_PIPELINE_CONNECT
      ? { NEON_PIPELINE_CONNECT: process.env.NEON_PIPELINE_CONNECT }
      : {}),
    ...overrides,
  };
}

/** An ExecutionContext like the Workers runtime's: it remembers what waitUntil was given. */
export function executionContext() {
  const pending: Promise<unknown>[] = [];
  const ctx = {
    waitUntil: (promise: Promise<unknown>) => void pending.push(promise),
    passThroughOnException: () => undefined,
    props: {},
  } as unknown as ExecutionContext;
  return { ctx, settled: () => Promise.allSettled(pending) };
}

export interface Answer<T = Record<string, unknown>> {
  status: number;
  headers: Headers;
  body: T;
}

/**
 * Calls the app the way the runtime does (request, env, ctx) and waits for its
 * waitUntil work, so a test ends only once the request's pool has been ended.
 */
export async function call<T = any>( // eslint-disable-line @typescript-eslint/no-explicit-any
  app: App,
  env: Bindings,
  method: string,
  path: string,
  body?: unknown,
  init: RequestInit = {},
): Promise<Answer<T>> {
  const { ctx, settled } = executionContext();
  const headers = new Headers(init.headers);
  let payload: BodyInit | undefined;
  if (typeof body === "string") payload = body;
  else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers.set("content-type", "application/json");
  }
  if (typeof body === "string" && !headers.has("content-type"))
    headers.set("content-type", "application/json");
  const res = await app.request(
    `http://worker.test${path}`,
    { ...init, method, headers, body: payload },
    env,
    ctx,
  );
  const text = await res.text();
  await settled();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

/** What the Worker's handlers open per invocation, served from a test's node-postgres pool (left open). */
export function openTestPool(pool: pg.Pool): OpenDatabase {
  return () => ({
    db: drizzle(pool) as unknown as Db,
    pool: pool as unknown as SqlPool & Queryable,
    close: async () => undefined,
  });
}

/**
 * The app as the Worker builds it, each invocation on a pool of its own over the
 * test database (node-postgres), ended with the invocation as on Workers.
 */
export function appOverTestDatabase(t: Pick<TestDatabase, "newPool">): App {
  return createApp({
    openDatabase: () => {
      const pool = t.newPool(2);
      return { db: drizzle({ client: pool }), pool, close: () => pool.end() };
    },
  });
}
