import type { MiddlewareHandler } from "hono";
import { Pool, neonConfig, type PoolClient } from "@neondatabase/serverless";
import { drizzle } from "drizzle-orm/neon-serverless";
import type { Db } from "../domain/db.ts";
import type { Queryable, SqlPool } from "../outbox/index.ts";
import type { Config, HonoEnv } from "./env.ts";
import { asError } from "./errors.ts";
import { useLocalWsProxy } from "./neon.ts";

export interface OpenedDatabase {
  /** Drizzle, for the domain's use cases. */
  db: Db;
  /** The same pool raw, for the relay core, which sends its own SQL text. */
  pool: SqlPool & Queryable;
  close(): Promise<void>;
}

export type OpenDatabase = (config: Config) => OpenedDatabase;

/**
 * Connections one invocation may hold at once. A request needs one for its own
 * work, one for the relay pass its kick runs and one for a `Prefer: wait` poll;
 * more only multiplied the load: under the chaos suite, with QStash delivering
 * jobs to many invocations at once, the driver's default of 10 per pool took 78
 * connections and Postgres (max_connections 100) refused clients. Queries beyond
 * the cap wait for a connection instead (e.g. the dashboard's four parallel reads).
 */
export const MAX_CONNECTIONS_PER_INVOCATION = 3;

/**
 * A Neon WebSocket Pool per request: Workers cannot keep a socket open across
 * requests, so a pool outliving its request would hand out dead connections.
 * Creating it is free (it connects on first query); it is ended after the
 * response, once the request's background work has settled.
 */
export const openNeonDatabase: OpenDatabase = (config) => {
  if (config.NEON_WS_PROXY) useLocalWsProxy(neonConfig, config.NEON_WS_PROXY, config.NEON_PIPELINE_CONNECT);
  const pool = new Pool({
    connectionString: config.DATABASE_URL,
    connectionTimeoutMillis: 10_000,
    // Never closed for idleness: the pool ends with its request anyway. pg's default
    // (10 s) closed the connection a webhook delivery held while its receiver took up
    // to 15 s, so recording the attempt connected again, and workerd reported that
    // close as "Network connection lost", logged as a pool error.
    idleTimeoutMillis: 0,
    max: MAX_CONNECTIONS_PER_INVOCATION,
  });
  let ending = false;
  // A connection that dies while idle emits on the pool; unheard, that would throw.
  // Once the pool is ending, a disconnect is what was asked for: pg ignores those
  // during end() only by Node's codes (ECONNRESET, EPIPE), and in workerd the
  // Neon socket reports the same event as a code-less "Network connection lost",
  // which was logged for every idle connection a request's pool ended.
  // In workerd the error is often the WebSocket's ErrorEvent, whose message reads
  // "Uncaught Error: Network connection lost.": its own error's words, not that.
  pool.on("error", (error: unknown) => {
    if (!ending) console.error("database pool:", asError(error).message);
  });
  // pg-pool listens to a client's "error" only while the client is idle: one taken
  // with connect() (Drizzle's transactions, one-trip writes) has no listener, so a
  // connection lost while held was thrown out of the WebSocket's event, which workerd
  // logs as "Uncaught Error: Connection terminated unexpectedly" (or the server's
  // FATAL, or "Unhandled error." with the socket's ErrorEvent): near a hundred lines
  // for one database blip under load. Nothing is lost to hear it here: the query
  // running fails with the same error (a later one "not queryable"), and its caller
  // answers and logs it; release() then drops the connection.
  pool.on("connect", (client: { on(event: "error", listener: () => void): unknown }) => {
    client.on("error", () => undefined);
  });
  // The connections taken with connect() and not given back. close() runs once the
  // request and its background work have settled, so any still held then was lost
  // track of, and pool.end() waits for every connection: it never finished, and
  // workerd logged "the Workers runtime canceled this request because it detected
  // that your Worker's code had hung". Drizzle's transaction takes its connection
  // before BEGIN and gives it back in a `finally` a failed BEGIN never reaches
  // (drizzle-orm#6241): a database blip left one behind per failed BEGIN.
  const held = new Set<PoolClient>();
  pool.on("acquire", (client: PoolClient) => held.add(client));
  pool.on("release", (_error: unknown, client: PoolClient) => held.delete(client));
  const close = () => {
    ending = true;
    for (const client of held) {
      client.release(true);
      // A connection still held may be running a query: a request whose Promise.all
      // had one read fail answers, and its pool is closed, while the other reads run
      // (GET /admin/stats with the schema behind). The driver releases that query's
      // connection itself once the query settles, and a second release throws out of
      // its callback: "Release called on client which has already been released",
      // uncaught, and the query's promise never settled. The connection is dropped
      // above and never handed out again, so its later release has nothing to do.
      client.release = () => undefined;
    }
    held.clear();
    return pool.end();
  };
  return { db: drizzle({ client: pool }), pool, close };
};

export function database(open: OpenDatabase = openNeonDatabase): MiddlewareHandler<HonoEnv> {
  return async (c, next) => {
    const { db, pool, close } = open(c.var.config);
    const tasks: Promise<unknown>[] = [];
    c.set("db", db);
    c.set("pool", pool);
    c.set("background", (task) => {
      tasks.push(task);
    });
    try {
      await next();
    } finally {
      c.executionCtx.waitUntil(
        Promise.allSettled(tasks).then(() => close().catch((e) => console.error("database close:", e))),
      );
    }
  };
}
