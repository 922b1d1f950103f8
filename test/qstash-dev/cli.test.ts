import { Client } from "@upstash/qstash";
import { describe, expect, it } from "vitest";
import { startReceiver } from "./receiver.ts";
import { run } from "./run.ts";

describe("npm run qstash:dev (infra/qstash-dev/main.ts)", () => {
  it("prints URL, token and keys from the environment, logs each delivery, stops on SIGTERM", async () => {
    const receiver = await startReceiver();
    const proc = run("infra/qstash-dev/main.ts", {
      QSTASH_DEV_PORT: "0",
      QSTASH_TOKEN: "cli-token",
      QSTASH_CURRENT_SIGNING_KEY: "sig_cli_current",
      QSTASH_NEXT_SIGNING_KEY: "",
    });
    try {
      const [, url] = await proc.waitForOutput(/QSTASH_URL=(http:\/\/127\.0\.0\.1:\d+)/);
      expect(proc.output()).toContain("QSTASH_TOKEN=cli-token");
      expect(proc.output()).toContain("QSTASH_CURRENT_SIGNING_KEY=sig_cli_current");
      expect(proc.output()).toMatch(/QSTASH_NEXT_SIGNING_KEY=sig_\S+/); // empty means generate
      const client = new Client({
        baseUrl: url!,
        token: "cli-token",
        devMode: false,
        enableTelemetry: false,
      });
      const { messageId } = await client.publishJSON({ url: receiver.url("/from-cli"), body: { ok: true } });
      await proc.waitForOutput(
        new RegExp(`deliver ${messageId} POST ${receiver.url("/from-cli")} .*status=200`),
      );
      proc.child.kill("SIGTERM");
      expect(await proc.waitForExit()).toBe(0);
    } finally {
      proc.child.kill("SIGKILL");
      await receiver.close();
    }
  });

  it("refuses a bad QSTASH_DEV_PORT instead of starting on a surprise port", async () => {
    const proc = run("infra/qstash-dev/main.ts", { QSTASH_DEV_PORT: "eighty" });
    expect(await proc.waitForExit()).toBe(1);
    expect(proc.output()).toMatch(/QSTASH_DEV_PORT must be a port number/);
  });
});

describe("close()", () => {
  it("leaves nothing running: no sockets, servers or timers", async () => {
    const proc = run("test/qstash-dev/fixtures/close-leaves-nothing.ts");
    expect(await proc.waitForExit()).toBe(0);
    expect(proc.output().trim().split("\n").at(-1)).toBe("[]");
  });
});
