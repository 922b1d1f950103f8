import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { createApp } from "../../src/worker/app.ts";
import journalFile from "../../drizzle/meta/_journal.json";
import { migrateDatabase, withDatabase } from "../../src/node/postgres.ts";
import { configureNeonForWsProxy, startWsProxy, type WsProxy } from "../../infra/ws-proxy.ts";
import { useTestDatabase } from "../support/db.ts";
import { newApiKey, withKey } from "../support/api-keys.ts";
import { bindings, call } from "../support/worker.ts";

// The app as the Worker runs it, with a database that turns it away for its settings:
// a wrong password (the pooler checks it, as Neon does), a database that does not
// exist, a schema older than the Worker. Each used to be a 503 with Retry-After: 1,
// or a bare 500, so a client retried what no retry fixes and the operator had to read
// the driver's words to learn the fault was theirs.
const t = useTestDatabase();
const adminUrl = inject("adminDatabaseUrl");
const unmigrated = `edge_outbox_unmigrated_${process.pid}`;
const app = createApp();
let pooled: WsProxy;
let direct: WsProxy;
let key: string;

beforeAll(async () => {
  key = await newApiKey(t.db, "s1");
  pooled = await startWsProxy({ pool: { upstreamUrl: t.url } });
  direct = await startWsProxy();
  configureNeonForWsProxy(direct);
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${unmigrated} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${unmigrated}`);
  await admin.end();
});

afterAll(async () => {
  await pooled?.close();
  await direct?.close();
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${unmigrated} WITH (FORCE)`);
  await admin.end();
});

function pooledUrl(change: (url: URL) => void): string {
  const url = new URL(pooled.pooledUrl!);
  change(url);
  return url.toString();
}

describe("a database that refuses the Worker's settings", () => {
  it.each([
    [
      "a wrong password",
      () => pooledUrl((u) => (u.password = "not-the-password")),
      "it refused the credentials in DATABASE_URL",
    ],
    [
      "a database that does not exist",
      () => pooledUrl((u) => (u.pathname = "/no_such_database")),
      "the database named in DATABASE_URL does not exist",
    ],
  ])(
    "%s: /healthz is a 500 naming the setting, never its value, with no Retry-After",
    async (_, url, why) => {
      const env = bindings({
        DATABASE_URL: url(),
        NEON_WS_PROXY: pooled.address,
        NEON_PIPELINE_CONNECT: "password",
      });
      const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
      try {
        const res = await call(app, env, "GET", "/healthz");
        expect(res.status).toBe(500);
        expect(res.headers.get("retry-after")).toBeNull();
        expect(res.body.error).toMatchObject({
          code: "MISCONFIGURED",
          message: `database misconfigured: ${why}`,
        });
        expect(JSON.stringify(res.body)).not.toMatch(/not-the-password|no_such_database|postgres/);
      } finally {
        errors.mockRestore();
      }
    },
  );

  it("a domain write is a 500 MISCONFIGURED with no Retry-After, and the log says why once", async () => {
    const env = bindings({
      DATABASE_URL: pooledUrl((u) => (u.password = "not-the-password")),
      NEON_WS_PROXY: pooled.address,
      NEON_PIPELINE_CONNECT: "password",
    });
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      for (let i = 0; i < 2; i++) {
        const res = await call(app, env, "POST", "/notes", { title: "t" }, withKey(key));
        expect(res.status).toBe(500);
        expect(res.headers.get("retry-after")).toBeNull();
        expect(res.body.error.code).toBe("MISCONFIGURED");
        expect(res.body.error.message).toMatch(/retrying will not help/);
        expect(res.body.error.message).not.toMatch(/credentials|password/);
      }
      const said = errors.mock.calls.filter((args) =>
        String(args[0]).includes("MISCONFIGURED: the database: it refused the credentials in DATABASE_URL"),
      );
      expect(said).toHaveLength(1);
    } finally {
      errors.mockRestore();
    }
  });

  it("a role without rights on the tables: 500 MISCONFIGURED naming the role's rights", async () => {
    // The API key lookup is refused (42501).
    await asBareRole("noperm", async (env) => {
      expect(await misconfiguredRead(env)).toContain(
        "MISCONFIGURED: the database: the role in DATABASE_URL may not read or write what this Worker needs",
      );
    });
  });

  it("a Worker deployed before migrate: its reads are 500 MISCONFIGURED and the log says run migrate", async () => {
    // The API key is checked against a table the unmigrated database does not have.
    const env = bindings({ DATABASE_URL: withDatabase(adminUrl, unmigrated), NEON_WS_PROXY: direct.address });
    expect((await misconfiguredRead(env)).some((line) => /run migrate, then deploy/.test(line))).toBe(true);
  });
});

describe("/healthz and the database's schema", () => {
  // One database walked through a deployment's orders of migrate and deploy, in turn.
  const env = () =>
    bindings({ DATABASE_URL: withDatabase(adminUrl, unmigrated), NEON_WS_PROXY: direct.address });
  const healthz = async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const res = await call(app, env(), "GET", "/healthz");
      return { res, logged: errors.mock.calls.map((args) => args.map(String).join(" ")) };
    } finally {
      errors.mockRestore();
    }
  };
  const journal = () => new pg.Client({ connectionString: withDatabase(adminUrl, unmigrated) });

  it("never migrated: a 500 saying run migrate, where SELECT 1 answered 200 while every other route failed", async () => {
    const { res } = await healthz();
    expect(res.status).toBe(500);
    expect(res.headers.get("retry-after")).toBeNull();
    expect(res.body.error).toMatchObject({
      code: "MISCONFIGURED",
      message:
        "database misconfigured: a table or column this Worker reads is missing: run migrate, then deploy",
    });
  });

  it("migrated, then the Worker built with a newer migration: a 500 saying so, the names in the log only", async () => {
    await migrateDatabase(withDatabase(adminUrl, unmigrated));
    const db = journal();
    await db.connect();
    try {
      expect((await healthz()).res.body).toMatchObject({
        status: "ok",
        database: { ok: true, schema: "current" },
      });
      // The newest migration not applied yet, as a database is before an upgrade's migrate.
      await db.query(
        `DELETE FROM drizzle.__drizzle_migrations WHERE created_at = (SELECT max(created_at) FROM drizzle.__drizzle_migrations)`,
      );
      const { res, logged } = await healthz();
      expect(res.status).toBe(500);
      expect(res.body.error).toMatchObject({
        code: "MISCONFIGURED",
        message: "database misconfigured: its schema is older than this Worker's: run migrate",
      });
      expect(JSON.stringify(res.body)).not.toMatch(/\d{4}_[a-z]/);
      const [previous, newest] = journalTags().slice(-2);
      expect(logged).toContain(
        `/healthz: the database's newest migration is ${previous}, this Worker's ${newest}: run migrate`,
      );
    } finally {
      await db.end();
    }
  });

  it("migrated ahead of the deploy (Upgrading's order): 200, saying the schema is newer", async () => {
    const db = journal();
    await db.connect();
    try {
      await db.query(
        `INSERT INTO drizzle.__drizzle_migrations (hash, created_at)
         SELECT 'next', max(created_at) + 2 * (SELECT max(created_at) - min(created_at) FROM drizzle.__drizzle_migrations) FROM drizzle.__drizzle_migrations`,
      );
    } finally {
      await db.end();
    }
    const { res } = await healthz();
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: "ok", database: { ok: true, schema: "newer" } });
  });

  it("a role kept to the application's tables, not drizzle's: 200, the schema unchecked", async () => {
    const grant = async (role: string) => {
      await t.pool.query(`GRANT USAGE ON SCHEMA public TO ${role}`);
      await t.pool.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${role}`);
    };
    await asBareRole(
      "nojournal",
      async (env) => {
        const res = await call(app, env, "GET", "/healthz");
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ status: "ok", database: { ok: true, schema: "unchecked" } });
      },
      grant,
    );
  });

  it("a role that may use none of the tables: 500, where it answered 200 while every other route failed", async () => {
    // The config walkthrough's readiness probe passed a Worker that answered every request 500.
    await asBareRole("nothing", async (env) => {
      const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
      try {
        const res = await call(app, env, "GET", "/healthz");
        expect(res.status).toBe(500);
        expect(res.body.error).toMatchObject({
          code: "MISCONFIGURED",
          message: expect.stringContaining(
            "database misconfigured: the role in DATABASE_URL may not read or write what this Worker needs",
          ),
        });
      } finally {
        errors.mockRestore();
      }
    });
  });
});

/** Runs `check` with the Worker logging in as a role nobody granted anything, dropped after. */
async function asBareRole(
  name: string,
  check: (env: ReturnType<typeof bindings>) => Promise<void>,
  grant?: (role: string) => Promise<void>,
) {
  const role = `edge_outbox_${name}_${process.pid}`;
  await t.pool.query(`DROP ROLE IF EXISTS ${role}`);
  await t.pool.query(`CREATE ROLE ${role} LOGIN PASSWORD 'bare-role'`);
  const url = new URL(t.url);
  url.username = role;
  url.password = "bare-role";
  try {
    await grant?.(role);
    await check(bindings({ DATABASE_URL: url.toString(), NEON_WS_PROXY: direct.address }));
  } finally {
    // Its grants go first: a role that holds any cannot be dropped.
    await t.pool.query(`DROP OWNED BY ${role}`);
    await t.pool.query(`DROP ROLE IF EXISTS ${role}`);
  }
}

function journalTags(): string[] {
  return (journalFile.entries as { tag: string }[]).map((e) => e.tag);
}

/**
 * A tenant's read (its API key looked up first) with these bindings: it must be a
 * 500 MISCONFIGURED without Retry-After. Answers what the Worker logged.
 */
async function misconfiguredRead(env: ReturnType<typeof bindings>): Promise<string[]> {
  const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
  try {
    const res = await call(app, env, "GET", "/notes/search?q=x", undefined, withKey(key));
    expect(res.status).toBe(500);
    expect(res.headers.get("retry-after")).toBeNull();
    expect(res.body.error.code).toBe("MISCONFIGURED");
    return errors.mock.calls.map((args) => String(args[0]));
  } finally {
    errors.mockRestore();
  }
}
