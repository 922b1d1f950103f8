import { spawn } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

it("npm run dev stops at once, naming the port and PORT, when the Worker's port is taken", async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  const port = (taken.address() as AddressInfo).port;
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port) };
    // Whatever the test run uses, the script must fail before it would start or reach Postgres.
    delete env.DATABASE_URL;
    const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], { cwd: root, env });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(code).toBe(1);
    expect(output).toContain(`[dev] port ${port} on 127.0.0.1 is taken`);
    expect(output).toContain("PORT=8787 npm run dev");
    // Nothing was started before the check.
    expect(output).not.toContain("Postgres:");
  } finally {
    await new Promise<void>((resolve) => taken.close(() => resolve()));
  }
}, 60_000);

it("npm run dev says in one line when DATABASE_URL cannot be reached", async () => {
  const free = createServer();
  await new Promise<void>((resolve) => free.listen(0, "127.0.0.1", resolve));
  const port = (free.address() as AddressInfo).port;
  await new Promise<void>((resolve) => free.close(() => resolve()));
  // Port 1 on loopback: nothing listens there. (Reads or makes .dev/secrets.json, as any run does.)
  const env = { ...process.env, PORT: String(port), DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" };
  const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], { cwd: root, env });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  expect(code).toBe(1);
  expect(output).toContain(
    "[dev] migrations: cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running",
  );
}, 60_000);
