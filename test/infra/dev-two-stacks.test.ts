import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { freePort } from "../../src/node/postgres.ts";
import { useTestDatabase } from "../support/db.ts";
import { waitFor } from "../support/helpers.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const t = useTestDatabase();

// The README's second stack beside a first, on other ports. Started at the same
// moment, both wranglers found DevTools' port 9229 free and the second's workerd
// died binding it ("specify a different port with --port"): one run in two here.
it("two npm run dev started together on their own ports both come up", async () => {
  const stacks = await Promise.all(
    [0, 1].map(async () => {
      const child = spawn(process.execPath, ["--import", "tsx", "infra/dev.ts"], {
        cwd: root,
        env: {
          ...process.env,
          DATABASE_URL: t.url,
          PORT: String(await freePort()),
          MAIL_SINK_PORT: "0",
          QSTASH_DEV_PORT: "0",
        },
      });
      const stack = {
        output: "",
        exited: new Promise<number | null>((resolve) => child.on("exit", resolve)),
        stop: () => child.kill("SIGINT"),
      };
      child.stdout.on("data", (chunk: Buffer) => (stack.output += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stack.output += chunk.toString()));
      return stack;
    }),
  );
  try {
    await waitFor(() => stacks.every((s) => /wrangler dev: ready|\[dev\] stopped/.test(s.output)), 150_000);
    for (const s of stacks)
      expect(s.output, s.output.slice(-3000)).toContain("wrangler dev: ready (healthz 200)");
  } finally {
    for (const s of stacks) s.stop();
    expect(await Promise.all(stacks.map((s) => s.exited))).toEqual([0, 0]);
  }
}, 200_000);
