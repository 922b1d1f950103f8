import pg from "pg";
import { migrateDatabase, startEmbeddedPostgres, withDatabase } from "../../src/node/postgres.ts";
import type { QueryCallback, SqlClient, SqlPool } from "../../src/outbox/index.ts";
import { BARE_TABLE } from "./ceiling.ts";
import { log } from "./progress.ts";

export interface BenchDatabase {
  /** Connection string of the benchmark's own database. */
  url: string;
  /** Where it runs: `DATABASE_URL` or an embedded server. */
  server: "DATABASE_URL" | "embedded";
  /** Setup, seeding and checks; never the pool a relay under test uses. */
  admin: pg.Pool;
  newPool(max?: number): pg.Pool;
  close(): Promise<void>;
}

/**
 * Creates `edge_outbox_bench_<pid>` on DATABASE_URL's server (or an embedded one),
 * migrates it with the project's own migrations and drops it again on close.
 */
export async function openBenchDatabase(): Promise<BenchDatabase> {
  let stopEmbedded: (() => Promise<void>) | undefined;
  let serverUrl = process.env.DATABASE_URL;
  const server = serverUrl ? "DATABASE_URL" : "embedded";
  if (!serverUrl) {
    log("starting embedded Postgres (set DATABASE_URL to use your own)");
    const embedded = await startEmbeddedPostgres();
    serverUrl = embedded.url;
    stopEmbedded = () => embedded.stop();
  }
  const name = `edge_outbox_bench_${process.pid}`;
  await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name}`);
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`);
  const url = withDatabase(serverUrl, name);
  await migrateDatabase(url);
  const pools: pg.Pool[] = [];
  const newPool = (max = 1) => {
    const pool = new pg.Pool({ connectionString: url, max });
    pool.on("error", () => undefined);
    pools.push(pool);
    return pool;
  };
  const admin = newPool(4);
  return {
    url,
    server,
    admin,
    newPool,
    async close() {
      await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
      await adminQuery(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
      await stopEmbedded?.();
    },
  };
}

async function adminQuery(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Empties the outbox and clears any backoff, so every repetition starts from the same state. */
export async function resetOutbox(admin: pg.Pool): Promise<void> {
  const bare = await admin.query(`SELECT to_regclass('${BARE_TABLE}') IS NOT NULL AS present`);
  const extra = (bare.rows[0] as { present: boolean }).present ? `, ${BARE_TABLE}` : "";
  await admin.query(`TRUNCATE events, outbox_alerts, corpus_notes, suppliers${extra} RESTART IDENTITY`);
  await admin.query(
    `UPDATE outbox_relay_state SET failures = 0, backoff_until = NULL, last_error = NULL, last_failure_at = NULL`,
  );
}

/** Bytes of padding that make a seeded payload about 200 bytes of jsonb text. */
export const PAYLOAD_PAD = 150;

/**
 * Inserts un-fanned events of ~200-byte payload. Runs of 4 consecutive events share
 * a subject, so a coalescing subscription really folds some jobs (as in
 * test/outbox/concurrency.test.ts). Done in chunks so a million rows stay cheap.
 */
export async function seedBacklog(
  admin: pg.Pool,
  n: number,
  options: {
    fanned?: boolean;
    /** Another table of the same shape (the bare ceiling's). */
    table?: string;
    /** `random`: each run of 4 shares a random-looking subject (a hash), as note or order ids are. */
    subjects?: "sequential" | "random";
    /** The events' type; a plain identifier-and-dots string (it is written into the SQL). */
    type?: string;
  } = {},
): Promise<void> {
  const table = options.table ?? "events";
  const subject = options.subjects === "random" ? "md5(((g - 1) / 4)::text)" : "'subject-' || ((g - 1) / 4)";
  const type = options.type ?? "bench.happened";
  if (!/^[a-z0-9_.]+$/.test(type)) throw new Error(`seedBacklog: type ${JSON.stringify(type)} is not plain`);
  const chunk = 100_000;
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk);
    await admin.query(
      `INSERT INTO ${table} (type, subject, scope, payload, fanned_out_at, fanout)
       SELECT '${type}', ${subject}, 'tenant-' || (((g - 1) / 4) % 10),
              jsonb_build_object('n', g, 'at', now(), 'pad', repeat('x', ${PAYLOAD_PAD})),
              ${options.fanned ? "now()" : "NULL"}, ${options.fanned ? `'{"mail":{"messageId":"msg_0"}}'::jsonb` : "NULL"}
         FROM generate_series(${from + 1}::bigint, ${to}::bigint) g`,
    );
  }
}

/** A clean starting point: dead tuples from the previous repetition gone, statistics fresh. */
export async function settle(admin: pg.Pool, table = "events"): Promise<void> {
  await admin.query(`VACUUM ANALYZE ${table}`);
  await admin.query(`CHECKPOINT`);
}

export async function unfanned(admin: pg.Pool, table = "events"): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${table} WHERE fanned_out_at IS NULL AND poisoned_at IS NULL`,
  );
  return rows[0]!.n;
}

/** Fanned rows whose `fanout` does not name both bench subscriptions: must be 0. */
export async function incompleteFanouts(admin: pg.Pool): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM events WHERE NOT (fanout ?& array['mail', 'index'])`,
  );
  return rows[0]!.n;
}

/**
 * A pool whose clients count every `query` call. With the simple protocol one call
 * is one message to the server and one answer back, i.e. one round trip, however
 * many statements the text holds.
 */
export class CountingPool implements SqlPool {
  queries = 0;
  constructor(private readonly inner: SqlPool) {}
  async connect(): Promise<SqlClient> {
    const client = await this.inner.connect();
    // Both forms the relay may use, forwarded as they came (send() takes the callback one).
    const query = (text: string, valuesOrCallback?: unknown[] | QueryCallback) => {
      this.queries++;
      return typeof valuesOrCallback === "function"
        ? client.query(text, valuesOrCallback)
        : client.query(text, valuesOrCallback);
    };
    return {
      query: query as SqlClient["query"],
      release: (destroy) => client.release(destroy),
      ...(client.on ? { on: client.on.bind(client) } : {}),
      ...(client.off ? { off: client.off.bind(client) } : {}),
    };
  }
}
