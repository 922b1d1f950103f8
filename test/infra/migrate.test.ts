import { copyFile, mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { MIGRATION_LOCK, migrateDatabase, migrationsFolder, withDatabase } from "../../src/node/postgres.ts";

// `migrate` against what a deployment meets: another run at the same moment, and a
// host that takes the connection and never answers.
const adminUrl = inject("adminDatabaseUrl");
const name = `edge_outbox_migrate_${process.pid}`;
const lockName = `edge_outbox_migrate_lock_${process.pid}`;

afterAll(async () => {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`DROP DATABASE IF EXISTS ${lockName} WITH (FORCE)`);
  await admin.end();
});

describe("migrate", () => {
  it("two runs at once on a fresh database both succeed, one after the other", async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const url = withDatabase(adminUrl, name);
    // Without the lock the second failed on the first's half-made tables.
    const [first, second] = await Promise.all([migrateDatabase(url), migrateDatabase(url)]);
    // One applied them all; the one that waited says it applied none, not that it migrated.
    expect([first.applied, second.applied].sort((a, b) => a - b)).toEqual([0, first.total]);
    expect(second.total).toBe(first.total);
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const { rows } = await db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM drizzle."__drizzle_migrations"',
      );
      const { rows: applied } = await db.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM (SELECT DISTINCT hash FROM drizzle."__drizzle_migrations") h',
      );
      // Each migration recorded once.
      expect(rows[0]!.n).toBe(applied[0]!.n);
      expect(rows[0]!.n).toBeGreaterThan(10);
    } finally {
      await db.end();
    }
  }, 120_000);

  it("gives up on a host that never answers, instead of hanging", async () => {
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as { port: number };
    try {
      const started = Date.now();
      await expect(
        migrateDatabase(`postgres://u:p@127.0.0.1:${port}/x`, undefined, { connectTimeoutMs: 500 }),
      ).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      silent.close();
    }
  });
});

// A migration that needs a table lock another session holds, as an upgrade meets on a
// live database: one pending migration adding a column to a table some transaction
// is reading.
describe("migrate behind a long transaction", () => {
  const url = withDatabase(adminUrl, lockName);
  let folder: string;

  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${lockName} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${lockName}`);
    await admin.end();
    folder = await mkdtemp(path.join(tmpdir(), "edge-outbox-migrations-"));
    await mkdir(path.join(folder, "meta"));
    const entry = { idx: 0, version: "7", when: 1, tag: "0000_add", breakpoints: true };
    await writeFile(
      path.join(folder, "meta", "_journal.json"),
      JSON.stringify({ version: "7", dialect: "postgresql", entries: [entry] }),
    );
    await writeFile(path.join(folder, "0000_add.sql"), "ALTER TABLE lockme ADD COLUMN c int;");
    return () => rm(folder, { recursive: true, force: true });
  });

  async function session(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    return client;
  }

  async function freshTable(db: pg.Client): Promise<void> {
    await db.query("DROP TABLE IF EXISTS lockme");
    await db.query("DROP SCHEMA IF EXISTS drizzle CASCADE");
    await db.query("CREATE TABLE lockme (id int)");
  }

  async function columnExists(db: pg.Client): Promise<boolean> {
    const { rows } = await db.query(
      "SELECT 1 FROM information_schema.columns WHERE table_name = 'lockme' AND column_name = 'c'",
    );
    return rows.length === 1;
  }

  /** Resolves once some session waits for a lock on lockme that it has not been granted. */
  async function migrationQueued(db: pg.Client): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const { rows } = await db.query(
        "SELECT 1 FROM pg_locks WHERE relation = 'lockme'::regclass AND NOT granted",
      );
      if (rows.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error("the migration never queued for its lock");
  }

  it("does not hold writes to the table for as long as the other transaction lasts, and applies after it", async () => {
    const [holder, writer, check] = await Promise.all([session(), session(), session()]);
    try {
      await freshTable(check);
      await holder.query("BEGIN");
      await holder.query("SELECT * FROM lockme");
      const lines: string[] = [];
      const migrating = migrateDatabase(url, folder, {
        lockTimeoutMs: 300,
        lockAttempts: 50,
        retryPauseMs: 50,
        log: (line) => lines.push(line),
      });
      await migrationQueued(check);
      // Without a lock timeout the insert queued behind the migration's request until
      // the reader committed: here, never, so the race is lost to the 10 s timer.
      const insert = writer.query("INSERT INTO lockme VALUES (1)").then(() => "inserted");
      const timer = new Promise((resolve) => setTimeout(resolve, 10_000, "still waiting"));
      expect(await Promise.race([insert, timer])).toBe("inserted");
      expect(await columnExists(check)).toBe(false);
      await holder.query("COMMIT");
      await migrating;
      expect(await columnExists(check)).toBe(true);
      expect(lines.some((line) => /waited 300 ms for a lock .* trying again/.test(line))).toBe(true);
    } finally {
      await Promise.all([holder.end(), writer.end(), check.end()]);
    }
  }, 60_000);

  it("gives up with the reason after its tries, having applied nothing", async () => {
    const [holder, check] = await Promise.all([session(), session()]);
    try {
      await freshTable(check);
      await holder.query("BEGIN");
      await holder.query("SELECT * FROM lockme");
      await expect(
        migrateDatabase(url, folder, { lockTimeoutMs: 100, lockAttempts: 2, retryPauseMs: 10 }),
      ).rejects.toThrow(/migrations not applied: .*lock another session holds, on each of 2 tries/);
      await holder.query("COMMIT");
      expect(await columnExists(check)).toBe(false);
      const { rows } = await check.query('SELECT count(*)::int AS n FROM drizzle."__drizzle_migrations"');
      expect(rows[0].n).toBe(0);
    } finally {
      await Promise.all([holder.end(), check.end()]);
    }
  }, 60_000);

  it("says it is waiting for another migrate, then applies once that one ends", async () => {
    const [other, check] = await Promise.all([session(), session()]);
    try {
      await freshTable(check);
      await other.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
      const lines: string[] = [];
      const migrating = migrateDatabase(url, folder, { log: (line) => lines.push(line) });
      for (let i = 0; i < 200 && lines.length === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      expect(lines).toEqual(["another migrate is running on this database; waiting for it to finish"]);
      expect(await columnExists(check)).toBe(false);
      await other.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]);
      await migrating;
      expect(await columnExists(check)).toBe(true);
    } finally {
      await Promise.all([other.end(), check.end()]);
    }
  }, 60_000);
});

/**
 * A database of its own migrated as it was before migration `idx` (the same files,
 * the journal cut there), for a migration that must meet the rows an older version
 * left. Answers its URL and the folder of the older migrations.
 */
function databaseBefore(idx: number): { url: string; before: () => string } {
  const database = `${name}_${String(idx).padStart(4, "0")}`;
  let folder = "";
  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${database}`);
    await admin.end();
    folder = await mkdtemp(path.join(tmpdir(), `edge-outbox-before-${idx}-`));
    await mkdir(path.join(folder, "meta"));
    const journal = JSON.parse(await readFile(path.join(migrationsFolder, "meta", "_journal.json"), "utf8"));
    const entries = journal.entries.filter((e: { idx: number }) => e.idx < idx);
    await writeFile(path.join(folder, "meta", "_journal.json"), JSON.stringify({ ...journal, entries }));
    for (const e of entries as { tag: string }[]) {
      await copyFile(path.join(migrationsFolder, `${e.tag}.sql`), path.join(folder, `${e.tag}.sql`));
    }
    return async () => {
      await rm(folder, { recursive: true, force: true });
      const drop = new pg.Client({ connectionString: adminUrl });
      await drop.connect();
      await drop.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await drop.end();
    };
  });
  return { url: withDatabase(adminUrl, database), before: () => folder };
}

describe("migration 0016 on a database with an alert per failed delivery", () => {
  const { url, before } = databaseBefore(16);

  it("keeps one open alert per endpoint, counting the open ones and dated from the oldest", async () => {
    await migrateDatabase(url, before());
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const [a, b] = [crypto.randomUUID(), crypto.randomUUID()];
      const raise = (endpoint: string, at: string, resolved = false) =>
        db.query(
          `INSERT INTO outbox_alerts (kind, message, details, created_at, resolved_at)
           VALUES ('webhook.delivery_failed', 'failed', jsonb_build_object('endpointId', $1::text, 'deliveryId', gen_random_uuid()), $2, $3)`,
          [endpoint, at, resolved ? at : null],
        );
      await raise(a, "2026-12-01T00:00:00Z");
      await raise(a, "2026-12-02T00:00:00Z");
      await raise(a, "2026-12-03T00:00:00Z");
      await raise(a, "2026-11-01T00:00:00Z", true); // resolved before: left as it was
      await raise(b, "2026-12-04T00:00:00Z");
      await db.query(
        "INSERT INTO outbox_alerts (kind, message, details) VALUES ('job.failed', 'x', '{}'), ('job.failed', 'y', '{}')",
      );

      await migrateDatabase(url);
      const { rows } = await db.query(
        `SELECT kind, details->>'endpointId' AS endpoint, resolved_at IS NULL AS open, (details->>'count')::int AS count,
                (details->>'firstFailedAt')::timestamptz AS first, (details->>'mergedInto')::int AS merged_into, id::int
           FROM outbox_alerts ORDER BY id`,
      );
      const ofA = rows.filter((r) => r.endpoint === a);
      const kept = ofA[2];
      expect(ofA.map((r) => [r.open, r.count])).toEqual([
        [false, null],
        [false, null],
        [true, 3],
        [false, null],
      ]);
      expect(kept.first).toEqual(new Date("2026-12-01T00:00:00Z"));
      expect(ofA.map((r) => r.merged_into)).toEqual([kept.id, kept.id, null, null]);
      expect(rows.filter((r) => r.endpoint === b).map((r) => [r.open, r.count])).toEqual([[true, 1]]);
      expect(rows.filter((r) => r.kind === "job.failed").map((r) => r.open)).toEqual([true, true]);
      // And from now on a second open one for an endpoint is refused by the index.
      await expect(raise(a, "2026-12-05T00:00:00Z")).rejects.toThrow(
        /outbox_alerts_open_endpoint_failure_key/,
      );
    } finally {
      await db.end();
    }
  });
});

describe("migration 0023 on a database with an alert per failed job", () => {
  const { url, before } = databaseBefore(23);

  it("keeps one open job.failed alert per subscription, saying how many it counts", async () => {
    await migrateDatabase(url, before());
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const raise = (subscription: string | null, message: string, at: string, resolved = false) =>
        db.query(
          `INSERT INTO outbox_alerts (kind, subscription, message, details, created_at, resolved_at)
           VALUES ('job.failed', $1, $2, jsonb_build_object('messageId', $2::text), $3, $4)`,
          [subscription, message, at, resolved ? at : null],
        );
      await raise(
        "notify.mail",
        "job m1 for notify.mail failed after 5 retries (no answer)",
        "2026-12-01T00:00:00Z",
      );
      await raise(
        "notify.mail",
        "job m2 for notify.mail failed after 5 retries (no answer)",
        "2026-12-02T00:00:00Z",
      );
      await raise("notify.mail", "job m0 for notify.mail failed", "2026-11-01T00:00:00Z", true);
      await raise(
        "corpus.index",
        "job c1 for corpus.index failed after 1 retry (no answer)",
        "2026-12-03T00:00:00Z",
      );
      // A failure that was never ours has no subscription to fold by: left as it is.
      await raise(null, "x", "2026-12-04T00:00:00Z");
      await raise(null, "y", "2026-12-04T00:00:00Z");

      await migrateDatabase(url);
      const { rows } = await db.query(
        `SELECT subscription, message, resolved_at IS NULL AS open, (details->>'count')::int AS count,
                (details->>'firstFailedAt')::timestamptz AS first, (details->>'mergedInto')::int AS merged_into, id::int
           FROM outbox_alerts ORDER BY id`,
      );
      const mail = rows.filter((r) => r.subscription === "notify.mail");
      expect(mail.map((r) => [r.open, r.count, r.merged_into])).toEqual([
        [false, null, mail[1].id],
        [true, 2, null],
        [false, null, null],
      ]);
      expect(mail[1].message).toBe(
        "2 jobs for notify.mail ran out of retries; the latest: job m2 for notify.mail failed after 5 retries (no answer)",
      );
      expect(mail[1].first).toEqual(new Date("2026-12-01T00:00:00Z"));
      const index = rows.find((r) => r.subscription === "corpus.index");
      expect([index.open, index.count, index.message]).toEqual([
        true,
        1,
        "job c1 for corpus.index failed after 1 retry (no answer)",
      ]);
      expect(rows.filter((r) => r.subscription === null).map((r) => r.open)).toEqual([true, true]);
      await expect(raise("notify.mail", "again", "2026-12-05T00:00:00Z")).rejects.toThrow(
        /outbox_alerts_open_job_failed_key/,
      );
    } finally {
      await db.end();
    }
  });
});

describe("migration 0025 on a database with a run's last retry due", () => {
  const { url, before } = databaseBefore(25);

  it("keeps each run's expected retry, under a name no QStash message id has", async () => {
    await migrateDatabase(url, before());
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      await db.query(
        `INSERT INTO subscription_failures
                (subscription, streak_started_at, last_failed_at, attempts, last_error, retry_due_at)
         VALUES ('notify.mail', now() - interval '1 hour', now(), 12, 'down', '2026-12-07T06:00:00Z'),
                ('corpus.index', now() - interval '1 hour', now(), 3, 'down', NULL)`,
      );
      await migrateDatabase(url);
      const { rows } = await db.query(
        "SELECT message_id, subscription, due_at FROM job_retries_due ORDER BY subscription",
      );
      expect(rows).toEqual([
        {
          message_id: "run-before-0025:notify.mail",
          subscription: "notify.mail",
          due_at: new Date("2026-12-07T06:00:00Z"),
        },
      ]);
      const runs = await db.query("SELECT subscription, attempts FROM subscription_failures ORDER BY 1");
      expect(runs.rows).toEqual([
        { subscription: "corpus.index", attempts: 3 },
        { subscription: "notify.mail", attempts: 12 },
      ]);
    } finally {
      await db.end();
    }
  });
});

describe("migration 0031 on a database with an alert per poisoned event", () => {
  const { url, before } = databaseBefore(31);

  it("keeps one open event.poisoned alert per type, saying how many it counts", async () => {
    await migrateDatabase(url, before());
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      // As the relay raised them before: one per event, `type`, `attempts`, `lastError`,
      // the event poisoned in the same statement.
      const raise = async (type: string, at: string, resolved = false) => {
        const { rows } = await db.query(
          `INSERT INTO events (type, subject, payload, attempts, last_error, poisoned_at, created_at)
           VALUES ($1, 's', '{}', 5, 'QStash 400', $2, $2) RETURNING id`,
          [type, at],
        );
        return db.query(
          `INSERT INTO outbox_alerts (kind, event_id, message, details, created_at, resolved_at)
           VALUES ('event.poisoned', $1::uuid, format('event %s (%s) poisoned after 5 failures: QStash 400', $1::uuid, $2::text),
                   jsonb_build_object('type', $2::text, 'attempts', 5, 'lastError', 'QStash 400'), $3, $4)
           RETURNING id::int`,
          [rows[0].id, type, at, resolved ? at : null],
        );
      };
      await raise("supplier.updated", "2026-12-01T00:00:00Z");
      // Resolved by hand, its event left poisoned: within the open ones' span, so counted.
      await raise("supplier.updated", "2026-12-01T12:00:00Z", true);
      await raise("supplier.updated", "2026-12-02T00:00:00Z");
      const latest = await raise("supplier.updated", "2026-12-03T00:00:00Z");
      await raise("supplier.updated", "2026-11-01T00:00:00Z", true); // before them all: left as it was
      await raise("note.created", "2026-12-04T00:00:00Z");

      await migrateDatabase(url);
      const { rows } = await db.query(
        `SELECT details->>'type' AS type, event_id, message, resolved_at IS NULL AS open,
                (details->>'count')::int AS count, details->>'eventId' AS event,
                (details->>'firstPoisonedAt')::timestamptz AS first, (details->>'lastPoisonedAt')::timestamptz AS last,
                (details->>'mergedInto')::int AS merged_into, id::int
           FROM outbox_alerts ORDER BY id`,
      );
      const kept = latest.rows[0].id;
      const suppliers = rows.filter((r) => r.type === "supplier.updated");
      expect(suppliers.map((r) => [r.open, r.count, r.merged_into])).toEqual([
        [false, null, kept],
        [false, null, null],
        [false, null, kept],
        [true, 4, null],
        [false, null, null],
      ]);
      const open = suppliers[3];
      expect(open.message).toBe(
        `4 events of type supplier.updated were poisoned; the latest: event ${open.event_id} poisoned after 5 failures: QStash 400`,
      );
      expect([open.event, open.first, open.last]).toEqual([
        open.event_id,
        new Date("2026-12-01T00:00:00Z"),
        new Date("2026-12-03T00:00:00Z"),
      ]);
      const notes = rows.filter((r) => r.type === "note.created");
      expect(notes.map((r) => [r.open, r.count])).toEqual([[true, 1]]);
      expect(notes[0].message).toMatch(/^event \S+ \(note\.created\) poisoned after 5 failures: QStash 400$/);
      // And from now on a second open one for a type is refused by the index.
      await expect(raise("supplier.updated", "2026-12-05T00:00:00Z")).rejects.toThrow(
        /outbox_alerts_open_event_poisoned_key/,
      );
    } finally {
      await db.end();
    }
  });
});
