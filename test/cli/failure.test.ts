import { createServer, type AddressInfo } from "node:net";
import { DrizzleQueryError } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { describeFailure } from "../../src/cli/failure.ts";
import { runCli } from "../support/cli.ts";

const withCode = (code: string, message = "x") => Object.assign(new Error(message), { code });
/** As Drizzle wraps a driver's error: the SQL and its values in the message, the reason in the cause. */
const wrapped = (cause: Error) =>
  new DrizzleQueryError('select "key_hash" from "api_keys" where "id" = $1', ["secret-value"], cause);

describe("a failure in one line an operator can act on", () => {
  it("reads the driver's reason under Drizzle's wrapper, never printing the SQL or its values", () => {
    const cases: [Error, string][] = [
      [
        wrapped(withCode("ECONNREFUSED")),
        "cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running",
      ],
      [
        wrapped(withCode("42P01", 'relation "api_keys" does not exist')),
        'the outbox tables are missing or older than this code: run `npm run outbox -- migrate` (relation "api_keys" does not exist)',
      ],
      [
        wrapped(withCode("42703", 'column "retry_delivered_at" does not exist')),
        'the outbox tables are missing or older than this code: run `npm run outbox -- migrate` (column "retry_delivered_at" does not exist)',
      ],
      [
        wrapped(withCode("42501", "permission denied for database app")),
        "the role in DATABASE_URL may not do this (permission denied for database app)",
      ],
      [
        wrapped(withCode("28P01", 'password authentication failed for user "app"')),
        "the database refused the credentials in DATABASE_URL (28P01)",
      ],
      [wrapped(withCode("23505", "duplicate key value")), "duplicate key value"],
      // pg 8.2x's own words for a connect that timed out, and the pool's.
      [
        new Error("Connection terminated due to connection timeout"),
        "cannot reach the database (timed out): check DATABASE_URL and that Postgres is running",
      ],
      [
        wrapped(new Error("timeout exceeded when trying to connect")),
        "cannot reach the database (timed out): check DATABASE_URL and that Postgres is running",
      ],
      // A session ended under a command: by an administrator, or found dead by pg's client.
      [
        wrapped(withCode("57P01", "terminating connection due to administrator command")),
        "the connection to the database was lost (terminating connection due to administrator command): what the command had not committed was rolled back; run it again",
      ],
      [
        new Error("Client has encountered a connection error and is not queryable"),
        "the connection to the database was lost (Client has encountered a connection error and is not queryable): what the command had not committed was rolled back; run it again",
      ],
    ];
    for (const [error, said] of cases) {
      const line = describeFailure(error);
      expect(line, error.message).toBe(said);
      expect(line).not.toMatch(/Failed query|secret-value/);
    }
  });

  it("a command over Drizzle says the same line as one over the relay core's SQL", async () => {
    const unreachable = { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" };
    const line =
      "edge-outbox: cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running";
    const [keys, stats] = await Promise.all([
      runCli(["api-keys", "list"], unreachable),
      runCli(["stats"], unreachable),
    ]);
    expect(stats.stderr.trim()).toBe(line);
    expect(keys.code).toBe(1);
    expect(keys.stderr.trim()).toBe(line);
  }, 60_000);

  it("a DATABASE_URL whose port is another service's says so, not pg's own words", async () => {
    // An HTTP server, as the mail sink on the next port is: it answers nonsense and closes.
    const server = createServer((socket) => socket.end("HTTP/1.1 400 Bad Request\r\n\r\n"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const stats = await runCli(["stats"], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/x` });
      expect(stats.code).toBe(1);
      expect(stats.stderr.trim()).toBe(
        "edge-outbox: the server at DATABASE_URL closed the connection before it answered as Postgres: check its host and port",
      );
    } finally {
      server.close();
    }
  }, 60_000);
});
