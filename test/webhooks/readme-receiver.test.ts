import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Db } from "../../src/domain/db.ts";
import { deliverWebhook } from "../../src/domain/webhooks/deliver.ts";
import type { DeliverQueue } from "../../src/domain/webhooks/deliver-queue.ts";
import { fanOutWebhook } from "../../src/domain/webhooks/fanout.ts";
import { freePort } from "../../src/node/postgres.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";
import { insertEndpoint, useSecretsKey } from "../support/webhooks.ts";

// The receiver example in README "### Delivery", run as written: a real
// delivery verifies and is answered 204, a tampered one is refused with 400.
const t = useTestDatabase();
const secrets = useSecretsKey();
const queue: DeliverQueue = { enqueue: async (jobs) => jobs.map((_, i) => `msg_readme_${i}`) };
let child: ChildProcess;
let port: number;
let endpoint: { id: string; secret: string };
const output: string[] = [];

function readmeExample(): string {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const section = readme.slice(readme.indexOf("### Delivery"));
  const match = /```js\n([\s\S]*?)```/.exec(section);
  if (!match) throw new Error('README "### Delivery" has no js example');
  return match[1]!;
}

beforeAll(async () => {
  port = await freePort();
  endpoint = await insertEndpoint(t.pool, secrets.key, {
    url: `http://127.0.0.1:${port}/hook`,
    scope: "readme",
  });
  child = spawn(process.execPath, ["--input-type=module", "-e", readmeExample()], {
    cwd: new URL("../..", import.meta.url),
    env: { ...process.env, WEBHOOK_SECRET: endpoint.secret, PORT: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (d: Buffer) => output.push(d.toString()));
  child.stderr!.on("data", (d: Buffer) => output.push(d.toString()));
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const socket = connect(port, "127.0.0.1", () => {
          socket.end();
          resolve(true);
        });
        socket.on("error", () => resolve(false));
      }),
    15_000,
  );
});
afterAll(() => {
  child?.kill();
});

describe("the README's receiver", () => {
  it("accepts a real delivery, logs it once, and refuses a forged one", async () => {
    const event = {
      id: crypto.randomUUID(),
      type: "corpus.note.changed",
      subject: "note-1",
      scope: "readme",
      payload: {},
      createdAt: new Date().toISOString(),
    };
    await fanOutWebhook(t.db as unknown as Db, queue, event);
    const { rows } = await t.pool.query("SELECT id FROM webhook_deliveries WHERE event_id = $1", [event.id]);
    const deps = {
      db: t.db as unknown as Db,
      secretsKey: await secrets.key,
      schedule: [1],
      urlPolicy: { allowPrivate: true },
    };
    expect(await deliverWebhook(deps, rows[0].id, 0)).toEqual({ kind: "delivered", status: 204 });
    await waitFor(() => output.join("").includes(`corpus.note.changed note-1`), 5_000);

    const forged = await fetch(`http://127.0.0.1:${port}/hook`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "webhook-id": event.id,
        "webhook-timestamp": String(Math.floor(Date.now() / 1000)),
        "webhook-signature": "v1,bm90IGEgcmVhbCBzaWduYXR1cmUgYXQgYWxsIQ==",
      },
      body: "{}",
    });
    expect(forged.status).toBe(400);
  });
});
