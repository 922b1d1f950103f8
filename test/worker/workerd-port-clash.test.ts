import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWorkerdStack } from "../../infra/workerd-stack.ts";
import { freePort } from "../../src/node/postgres.ts";
import { useTestDatabase } from "../support/db.ts";
import { bindings } from "../support/worker.ts";

// The workerd stack picks the Worker's port free, and workerd binds it only after
// bundling: another process can take it in between. wrangler then reports an error
// event and never settles `ready`, so a suite's start-up hung until its hook budget
// ran out. The stack tries another port instead, and gives up with the reason.
const t = useTestDatabase();
let taken: net.Server;
let takenPort: number;

beforeAll(async () => {
  taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  takenPort = (taken.address() as net.AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => taken.close(() => resolve())));

describe("the workerd stack on a port someone else took", () => {
  it("starts on another port and answers there", async () => {
    const picked: number[] = [];
    const stack = await startWorkerdStack({
      databaseUrl: t.url,
      bindings: bindings(),
      pickPort: async () => {
        const port = picked.length === 0 ? takenPort : await freePort();
        picked.push(port);
        return port;
      },
    });
    try {
      expect(picked).toHaveLength(2);
      expect(stack.url).toBe(`http://127.0.0.1:${picked[1]}`);
      // PUBLIC_URL follows the port the Worker got: QStash delivers and signs for it.
      expect(stack.env.PUBLIC_URL).toBe(stack.url);
      const res = await stack.fetch("/healthz");
      expect(res.status).toBe(200);
    } finally {
      await stack.close();
    }
  }, 120_000);

  it("gives up with the reason when every port it tries is taken, rather than hanging", async () => {
    let tries = 0;
    await expect(
      startWorkerdStack({
        databaseUrl: t.url,
        bindings: bindings(),
        pickPort: async () => {
          tries++;
          return takenPort;
        },
      }),
    ).rejects.toThrow(/Address already in use/);
    expect(tries).toBe(3);
  }, 120_000);
});
