import { spawn } from "node:child_process";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { waitFor } from "../support/helpers.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** Runs `npm run dev`'s script until it exits, with stdout and stderr together. */
async function runDev(env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], { cwd: root, env });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  return { code, output };
}

/**
 * `npm run dev` with these ports (DATABASE_URL unset), which must stop at once, before
 * starting anything, naming the taken port; the port its hint suggests for `variable`.
 */
async function refusedStart(
  ports: Record<"PORT" | "MAIL_SINK_PORT" | "QSTASH_DEV_PORT", number>,
  taken: number,
  variable: string,
): Promise<number> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, port] of Object.entries(ports)) env[name] = String(port);
  delete env.DATABASE_URL;
  const { code, output } = await runDev(env);
  expect(code).toBe(1);
  expect(output).toContain(`[dev] port ${taken} on 127.0.0.1 is taken`);
  expect(output).not.toContain("Postgres:");
  const hinted = Number(new RegExp(`e\\.g\\. ${variable}=(\\d+) npm run dev`).exec(output)?.[1]);
  // Another port, free when it was checked (the next one, unless that is in use too).
  expect(hinted).toBeGreaterThan(0);
  expect(hinted).not.toBe(taken);
  return hinted;
}

/** A server listening on `port` on 127.0.0.1 (0: one the system picks); rejects when it cannot. */
async function listening(port = 0): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

it("npm run dev stops at once, naming the port and PORT, when the Worker's port is taken", async () => {
  const taken = await listening();
  try {
    // Whatever the test run uses, the script must fail before it would start or reach Postgres.
    await refusedStart({ PORT: taken.port, MAIL_SINK_PORT: 0, QSTASH_DEV_PORT: 0 }, taken.port, "PORT");
  } finally {
    await taken.close();
  }
}, 60_000);

// The fixed ports besides the Worker's, each checked before anything starts.
it.each([
  ["MAIL_SINK_PORT", "the sink's"],
  ["QSTASH_DEV_PORT", "the local QStash's"],
])(
  "npm run dev stops at once, naming %s, when %s port is taken",
  async (variable) => {
    const taken = await listening();
    const free = await listening();
    await free.close();
    try {
      const ports = { PORT: free.port, MAIL_SINK_PORT: 0, QSTASH_DEV_PORT: 0, [variable]: taken.port };
      await refusedStart(ports, taken.port, variable);
    } finally {
      await taken.close();
    }
  },
  60_000,
);

it("npm run dev's hint for a taken port skips the stack's own ports", async () => {
  // The sink's port is taken, and the next one is the stack's QStash's (whether that one
  // is free does not matter: the sink's is checked first).
  const taken = await listening();
  try {
    let free = await listening();
    await free.close();
    while (free.port === taken.port + 1 || free.port === taken.port + 2) {
      free = await listening();
      await free.close();
    }
    const ports = { PORT: free.port, MAIL_SINK_PORT: taken.port, QSTASH_DEV_PORT: taken.port + 1 };
    const hinted = await refusedStart(ports, taken.port, "MAIL_SINK_PORT");
    // Not taken.port + 1, which this stack's QStash would then collide with, nor the Worker's.
    expect(hinted).not.toBe(taken.port + 1);
    expect(hinted).not.toBe(free.port);
  } finally {
    await taken.close();
  }
}, 60_000);

it("npm run dev's hint for a taken port names one free at that moment", async () => {
  // The Worker's port and the next one both taken (a second stack's, another server).
  let taken: Awaited<ReturnType<typeof listening>>;
  let after: Awaited<ReturnType<typeof listening>> | undefined;
  do {
    taken = await listening();
    after = await listening(taken.port + 1).catch(() => undefined);
    if (!after) await taken.close();
  } while (!after);
  try {
    const hinted = await refusedStart(
      { PORT: taken.port, MAIL_SINK_PORT: 0, QSTASH_DEV_PORT: 0 },
      taken.port,
      "PORT",
    );
    // Not taken.port + 1, which was taken too: following the hint failed again.
    expect(hinted).not.toBe(taken.port + 1);
    await (await listening(hinted)).close();
  } finally {
    await taken.close();
    await after.close();
  }
}, 60_000);

it("npm run dev refuses the same port for two of its servers, and port 0 for the Worker, before starting anything", async () => {
  const free = await listening();
  await free.close();
  const base: NodeJS.ProcessEnv = { ...process.env, MAIL_SINK_PORT: "0", QSTASH_DEV_PORT: "0" };
  delete base.DATABASE_URL;
  const same = await runDev({ ...base, PORT: String(free.port), QSTASH_DEV_PORT: String(free.port) });
  expect(same.code).toBe(1);
  expect(same.output).toContain(
    `[dev] PORT and QSTASH_DEV_PORT are both ${free.port}: give each its own port`,
  );
  expect(same.output).not.toContain("Postgres:");
  // The banner names it and the stack waits on it: 0 came up on a random port and then
  // waited 120 s on :0.
  const zero = await runDev({ ...base, PORT: "0" });
  expect(zero.code).toBe(1);
  expect(zero.output).toContain('[dev] PORT must be a port number from 1 to 65535, got "0"');
  expect(zero.output).not.toContain("Postgres:");
}, 60_000);

it("npm run dev says in one line when DATABASE_URL cannot be reached", async () => {
  const free = await listening();
  await free.close();
  // Port 1 on loopback: nothing listens there. (Reads or makes .dev/secrets.json, as any run does.)
  const { code, output } = await runDev({
    ...process.env,
    PORT: String(free.port),
    // Not the default: a running npm run dev holds it.
    MAIL_SINK_PORT: "0",
    QSTASH_DEV_PORT: "0",
    DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
  });
  expect(code).toBe(1);
  expect(output).toContain(
    "[dev] migrations: cannot reach the database (ECONNREFUSED): check DATABASE_URL and that Postgres is running",
  );
}, 60_000);

it("npm run dev refuses a DEV_SWEEP_SECONDS or QSTASH_DEV_TIME_SCALE it cannot use, before starting anything", async () => {
  const says: Record<string, string> = {
    DEV_SWEEP_SECONDS:
      "[dev] DEV_SWEEP_SECONDS must be a whole number from 0 to 86400 (a number of seconds, 0 for off), got",
    QSTASH_DEV_TIME_SCALE: "[dev] QSTASH_DEV_TIME_SCALE must be a non-negative number (e.g. 0.01), got",
  };
  const cases: [string, string][] = [
    ["DEV_SWEEP_SECONDS", "1m"],
    ["DEV_SWEEP_SECONDS", "-5"],
    ["DEV_SWEEP_SECONDS", "0.5"],
    ["DEV_SWEEP_SECONDS", "86401"],
    ["QSTASH_DEV_TIME_SCALE", "fast"],
    ["QSTASH_DEV_TIME_SCALE", "-1"],
  ];
  for (const [name, value] of cases) {
    // Were the value let through, this run would still end early, at the migrations.
    const { code, output } = await runDev({
      ...process.env,
      MAIL_SINK_PORT: "0",
      QSTASH_DEV_PORT: "0",
      DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
      [name]: value,
    });
    expect(code, `${name}=${value}`).toBe(1);
    expect(output, `${name}=${value}`).toContain(`${says[name]} ${JSON.stringify(value)}`);
    // Refused before the first step: nothing was started.
    expect(output, `${name}=${value}`).not.toContain("Postgres:");
  }
}, 60_000);

it("npm run dev stops what it started when its terminal closes (SIGHUP), as on Ctrl-C", async () => {
  // A database that takes the connection and never answers: the stack waits at its
  // migrations, with the proxy, QStash and the sink not yet started.
  const held = new Set<Socket>();
  const silent = createServer((socket) => void held.add(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const free = await listening();
  await free.close();
  const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], {
    cwd: root,
    env: {
      ...process.env,
      PORT: String(free.port),
      MAIL_SINK_PORT: "0",
      QSTASH_DEV_PORT: "0",
      DATABASE_URL: `postgres://postgres@127.0.0.1:${(silent.address() as AddressInfo).port}/none`,
    },
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.on("exit", (code, signal) => resolve([code, signal])),
  );
  try {
    await waitFor(() => output.includes("[dev] migrations: applying"), 30_000);
    child.kill("SIGHUP");
    expect(await exited).toEqual([0, null]);
    expect(output).toContain("[dev] stopping…");
    expect(output).toContain("[dev] stopped");
  } finally {
    child.kill("SIGKILL");
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  }
}, 60_000);
