import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface DevServer {
  url: string;
  token: string;
  /** Forgets every message and deduplication id (and keeps delivery paused), between repetitions. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** Starts bench/support/qstash-dev-process.ts and waits for its address. */
export function startDevServerProcess(): Promise<DevServer> {
  const entry = fileURLToPath(new URL("./qstash-dev-process.ts", import.meta.url));
  const child = spawn(process.execPath, ["--import", "tsx", entry], { stdio: ["pipe", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    const onData = (d: Buffer) => {
      out += d.toString();
      const newline = out.indexOf("\n");
      if (newline < 0) return;
      child.stdout.off("data", onData);
      const { url, token } = JSON.parse(out.slice(0, newline)) as { url: string; token: string };
      const admin = async (route: string) => {
        const res = await fetch(`${url}/__admin/${route}`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: "{}",
        });
        if (!res.ok) throw new Error(`qstash-dev /__admin/${route}: ${res.status} ${await res.text()}`);
      };
      resolve({
        url,
        token,
        async reset() {
          await admin("reset");
          await admin("pause");
        },
        close: () =>
          new Promise<void>((done) => {
            child.once("exit", () => done());
            child.stdin.end();
            setTimeout(() => child.kill("SIGKILL"), 5000).unref();
          }),
      });
    };
    child.stdout.on("data", onData);
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`qstash-dev process exited early (${code})`)));
  });
}
