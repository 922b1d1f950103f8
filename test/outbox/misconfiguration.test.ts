import { describe, expect, it } from "vitest";
import { databaseMisconfigurationOf } from "../../src/outbox/index.ts";
import { useTestDatabase } from "../support/db.ts";

// What Postgres says when the schema is older than the code, read from real errors:
// a migration skipped leaves a table, a column or a unique index out, and each must
// read as "run migrate", not as a bug (a Worker on a schema at 0028 failed every sweep
// with 42P10 and no hint: the config walkthrough).
const t = useTestDatabase();

async function sqlstateOf(statement: string): Promise<unknown> {
  const error = await t.pool.query(statement).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, statement).toBeDefined();
  return (error as { code?: unknown }).code;
}

describe("a schema older than the code", () => {
  it("is what a missing table, column, unique index, type or function says", async () => {
    await t.pool.query("CREATE TABLE IF NOT EXISTS behind (id int, key text)");
    const statements = [
      "SELECT * FROM no_such_table",
      "SELECT no_such_column FROM behind",
      // The unique index a later migration adds, which ON CONFLICT names.
      "INSERT INTO behind (id, key) VALUES (1, 'a') ON CONFLICT (key) DO NOTHING",
      "SELECT 'x'::no_such_type",
      "SELECT no_such_function(1)",
    ];
    for (const statement of statements)
      expect(databaseMisconfigurationOf(await sqlstateOf(statement)), statement).toBe("schema");
  });

  it("is not a query that is wrong in itself", async () => {
    expect(databaseMisconfigurationOf(await sqlstateOf("SELECT 1/0"))).toBeUndefined();
    expect(databaseMisconfigurationOf(await sqlstateOf("SELEC 1"))).toBeUndefined();
  });
});
