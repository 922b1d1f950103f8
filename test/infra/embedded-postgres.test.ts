import { chmod, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { waitFor } from "../support/helpers.ts";
import { stat } from "node:fs/promises";
import pg from "pg";
import { passwordFileOf, startEmbeddedPostgres, startFailure } from "../../src/node/postgres.ts";

/**
 * A data folder inside a temporary one the postgres user can walk into when the tests
 * run as root (see startEmbeddedPostgres); `remove` deletes both.
 */
async function walkableDataDir(name: string): Promise<{ dataDir: string; remove: () => Promise<void> }> {
  const own = await mkdtemp(path.join(tmpdir(), `edge-outbox-pg-${name}-`));
  await chmod(own, 0o755);
  return { dataDir: path.join(own, "data"), remove: () => rm(own, { recursive: true, force: true }) };
}

describe("embedded Postgres that cannot start", () => {
  it("says why from Postgres's own lines, with what to do", () => {
    const lock = startFailure("/d", 54329, [
      "2026-12-05 02:21:00 LOG:  starting PostgreSQL 18",
      '2026-12-05 02:21:00 FATAL:  lock file "postmaster.pid" already exists',
      '2026-12-05 02:21:00 HINT:  Is another postmaster (PID 42) running in data directory "/d"?',
    ]);
    expect(lock).toMatch(/^Postgres did not start \(data \/d, port 54329\): .*FATAL: {2}lock file/);
    expect(lock).toContain("HINT:  Is another postmaster (PID 42)");
    expect(lock).not.toContain("starting PostgreSQL 18");
    expect(lock).toContain("Another Postgres is running on this data directory");

    const port = startFailure("/d", 5432, [
      'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use',
      "HINT:  Is another postmaster already running on port 5432? If not, wait a few seconds and retry.",
      'WARNING:  could not create listen socket for "127.0.0.1"',
      "FATAL:  could not create any TCP/IP sockets",
    ]);
    expect(port).toContain("could not bind IPv4 address");
    expect(port).toContain("Port 5432 is taken");
    // Its HINT asks about "another postmaster" too: not the data-directory advice.
    expect(port).not.toContain("on this data directory");

    // Nothing recognisable: its last lines, as they came.
    expect(startFailure("/d", 1, ["one", "two"])).toBe(
      "Postgres did not start (data /d, port 1): one / two.",
    );
    expect(startFailure("/d", 1, [])).toBe("Postgres did not start (data /d, port 1): no message.");
  });

  it("a second server on the same data fails with that message, and the first keeps running", async () => {
    const { dataDir, remove } = await walkableDataDir("twice");
    const first = await startEmbeddedPostgres({ dataDir });
    try {
      // Caught by hand: `rejects.toThrow(regex)` passes when the promise rejects with
      // undefined, which is exactly what the package does on its own.
      const failure = await startEmbeddedPostgres({ dataDir }).then(
        async (second) => {
          await second.stop();
          return undefined;
        },
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(Error);
      expect((failure as Error).message).toMatch(
        /^Postgres did not start .*lock file "postmaster\.pid" already exists.*Another Postgres is running on this data directory/,
      );
      const pg = (await import("pg")).default;
      const client = new pg.Client({ connectionString: first.url });
      await client.connect();
      try {
        expect((await client.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
      } finally {
        await client.end();
      }
    } finally {
      await first.stop();
      await remove();
    }
  }, 120_000);

  it("a server that died is said to have, and stopping it returns at once", async () => {
    const { dataDir, remove } = await walkableDataDir("died");
    const server = await startEmbeddedPostgres({ dataDir });
    try {
      const died = new Promise<string>((resolve) => server.onUnexpectedExit(resolve));
      // The postmaster's pid is the first line of its lock file.
      const pid = Number((await readFile(path.join(dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
      process.kill(pid, "SIGKILL");
      expect(await died).toBe("killed by SIGKILL");
      // Before, stop() waited for an exit event that had already come: for ever.
      const stopped = await Promise.race([
        server.stop().then(() => "stopped"),
        new Promise((resolve) => setTimeout(() => resolve("still waiting"), 10_000)),
      ]);
      expect(stopped).toBe("stopped");
    } finally {
      await remove();
    }
  }, 120_000);

  it("a server stopped on purpose is not reported as having died", async () => {
    const server = await startEmbeddedPostgres();
    const heard: string[] = [];
    server.onUnexpectedExit((how) => heard.push(how));
    await server.stop();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(heard).toEqual([]);
  }, 120_000);
});

describe("embedded Postgres under a caller that stops it on Ctrl-C", () => {
  // The package's own hook stopped the server and exited the process while npm run dev
  // was still stopping the Worker: wrangler and workerd were left running.
  async function interrupt(mode: "caller" | "package"): Promise<string> {
    const fixture = fileURLToPath(new URL("./fixtures/caller-stops-postgres.ts", import.meta.url));
    // Removed after: the package's hook leaves its data behind.
    const { dataDir, remove } = await walkableDataDir("signals");
    const child = spawn(process.execPath, ["--import", "tsx", fixture, mode, dataDir]);
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise((resolve) => child.on("exit", resolve));
    try {
      await waitFor(() => output.includes("ready"), 60_000);
      child.kill("SIGINT");
      await exited;
      return output;
    } finally {
      child.kill("SIGKILL");
      await remove();
    }
  }

  it("with callerHandlesSignals, the caller's own stop runs to its end", async () => {
    const output = await interrupt("caller");
    expect(output).toContain("stopping the rest first");
    expect(output).toContain("stopped by the caller");
  }, 90_000);

  it("without it, the package's hook exits first (why npm run dev sets it)", async () => {
    const output = await interrupt("package");
    expect(output).toContain("stopping the rest first");
    expect(output).not.toContain("stopped by the caller");
  }, 90_000);
});

describe("embedded Postgres's password", () => {
  // It was "postgres" for every server: any local process, or a web page through the
  // ws proxy (a security walkthrough did it from Chromium), could log in as superuser.
  const refusesOldDefault = async (url: string) => {
    const u = new URL(url);
    u.password = "postgres";
    const client = new pg.Client({ connectionString: u.toString() });
    const code = await client.connect().then(
      () => "connected",
      (error: { code?: string }) => error.code,
    );
    await client.end().catch(() => undefined);
    return code === "28P01";
  };
  const works = async (url: string) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.end();
  };

  it("is made for a kept data folder, kept beside it (owner only), and the old default is refused", async () => {
    const { dataDir, remove } = await walkableDataDir("password");
    try {
      const first = await startEmbeddedPostgres({ dataDir });
      const password = new URL(first.url).password;
      expect(password).toMatch(/^[\w-]{24}$/);
      expect((await readFile(passwordFileOf(dataDir), "utf8")).trim()).toBe(password);
      expect((await stat(passwordFileOf(dataDir))).mode & 0o777).toBe(0o600);
      await works(first.url);
      expect(await refusesOldDefault(first.url)).toBe(true);
      await first.stop();
      // The next start on the same folder finds the same password.
      const again = await startEmbeddedPostgres({ dataDir });
      expect(new URL(again.url).password).toBe(password);
      await works(again.url);
      await again.stop();
    } finally {
      await remove();
    }
  }, 120_000);

  it("a folder from before, on the old default, is moved to a password of its own", async () => {
    const { dataDir, remove } = await walkableDataDir("password");
    try {
      // Made as the code before made it: the old default, and no password file.
      const made = await startEmbeddedPostgres({ dataDir });
      const client = new pg.Client({ connectionString: made.url });
      await client.connect();
      await client.query("ALTER ROLE postgres PASSWORD 'postgres'");
      await client.end();
      await made.stop();
      await rm(passwordFileOf(dataDir));

      const upgraded = await startEmbeddedPostgres({ dataDir });
      expect(new URL(upgraded.url).password).not.toBe("postgres");
      await works(upgraded.url);
      expect(await refusesOldDefault(upgraded.url)).toBe(true);
      await upgraded.stop();
    } finally {
      await remove();
    }
  }, 120_000);
});
