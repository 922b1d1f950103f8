import type { TestProject } from "vitest/node";
import pg from "pg";
import {
  migrateDatabase,
  startEmbeddedPostgres,
  withDatabase,
  type EmbeddedServer,
} from "../../src/node/postgres.ts";
import { startWsProxy, takesPipelinedConnect } from "../../infra/ws-proxy.ts";

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
  }
}

/**
 * One Postgres for the whole run: DATABASE_URL when set, otherwise an embedded
 * server started here and stopped at the end. Migrations run once, into a
 * template; each test file clones its own database from it (test/support/db.ts).
 */
export default async function setup(project: TestProject) {
  let embedded: EmbeddedServer | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await startEmbeddedPostgres();
    adminUrl = embedded.url;
  }
  const template = `edge_outbox_tpl_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${template}`);
    await admin.query(`CREATE DATABASE ${template}`);
  } finally {
    await admin.end();
  }
  await migrateDatabase(withDatabase(adminUrl, template));
  // The embedded server uses `password` authentication, as Neon does, and the Neon
  // driver pipelines its connect. A DATABASE_URL server may use trust or SCRAM,
  // which refuse that: the tests then connect unpipelined (test workers inherit this).
  if (embedded === undefined) {
    const proxy = await startWsProxy();
    try {
      if (!(await takesPipelinedConnect(proxy, adminUrl))) process.env.NEON_PIPELINE_CONNECT = "off";
    } finally {
      await proxy.close();
    }
  }
  project.provide("adminDatabaseUrl", adminUrl);
  project.provide("templateDatabase", template);

  return async () => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${template} WITH (FORCE)`).catch(() => undefined);
    await client.end();
    await embedded?.stop();
  };
}
