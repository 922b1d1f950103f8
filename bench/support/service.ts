import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { childNodeArgs } from "./child.ts";
import type { AcceptOnlyStats } from "../../infra/qstash-accept-only.ts";
import type { WsProxyStats } from "../../infra/ws-proxy.ts";

/**
 * A stand-in for another machine's service (Neon's WebSocket proxy, QStash) in its
 * own Node process, so its CPU and its timers are not the relay's: a delay held
 * on the relay's own event loop would stretch with every pass's JavaScript.
 * The entry sends `{ ready: info }` once listening, answers `{ id, command }`
 * with `{ id, result }` (or `{ id, error }`), and exits when asked to `close`.
 */
export interface ServiceProcess<Info> {
  info: Info;
  /** The service's process id, e.g. to read its CPU time. */
  pid: number;
  call<T>(command: string): Promise<T>;
  close(): Promise<void>;
}

type Reply = { id: number; result?: unknown; error?: string };

export function startServiceProcess<Info>(entry: string, args: string[] = []): Promise<ServiceProcess<Info>> {
  const child: ChildProcess = fork(fileURLToPath(new URL(entry, import.meta.url)), args, {
    // BENCH_CHILD_NODE_ARGS reaches the stand-ins too (child.ts), so the proxy and the
    // accept-only endpoint can be profiled under the load the bench puts on them.
    execArgv: [...childNodeArgs(), "--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  let nextId = 0;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => {
      reject(new Error(`${entry} exited early (${code})`));
      for (const p of pending.values()) p.reject(new Error(`${entry} exited (${code})`));
    });
    child.on("message", (message: { ready?: Info } & Reply) => {
      if (message.ready !== undefined) {
        resolve({
          info: message.ready,
          pid: child.pid!,
          call: <T>(command: string) =>
            new Promise<T>((done, fail) => {
              const id = ++nextId;
              // Ctrl-C reaches the whole process group, so the service may be gone
              // already: fail the call (the callback form) rather than crash this process.
              if (!child.connected) return fail(new Error(`${entry} is gone (${command})`));
              pending.set(id, { resolve: done as (v: unknown) => void, reject: fail });
              child.send({ id, command }, (error) => {
                if (!error) return;
                pending.delete(id);
                fail(error);
              });
            }),
          close: () =>
            new Promise<void>((done) => {
              if (child.exitCode !== null || child.signalCode !== null) return done();
              child.once("exit", () => done());
              if (child.connected) child.send({ id: 0, command: "close" }, () => undefined);
              else child.kill("SIGTERM");
              setTimeout(() => child.kill("SIGKILL"), 5000).unref();
            }),
        });
        return;
      }
      const waiting = pending.get(message.id);
      pending.delete(message.id);
      if (message.error !== undefined) waiting?.reject(new Error(message.error));
      else waiting?.resolve(message.result);
    });
  });
}

/** The child's side: report `info`, then serve `commands` until `close`. */
export function serveCommands<Info>(
  info: Info,
  commands: Record<string, () => unknown>,
  close: () => Promise<void>,
): void {
  const send = (message: unknown) => process.send!(message);
  process.on("message", (message: { id: number; command: string }) => {
    if (message.command === "close") {
      void close().then(() => process.exit(0));
      return;
    }
    const command = commands[message.command];
    if (!command) return send({ id: message.id, error: `unknown command ${message.command}` });
    Promise.resolve()
      .then(command)
      .then(
        (result) => send({ id: message.id, result: result ?? null }),
        (error: unknown) => send({ id: message.id, error: String(error) }),
      );
  });
  // The parent went away (Ctrl-C, a crash): do not outlive it.
  process.on("disconnect", () => void close().then(() => process.exit(0)));
  send({ ready: info });
}

/** The accept-only QStash endpoint (infra/qstash-accept-only.ts) in its own process. */
export interface AcceptOnlyService {
  url: string;
  token: string;
  pid: number;
  stats(): Promise<AcceptOnlyStats>;
  reset(): Promise<void>;
  close(): Promise<void>;
}

export async function startAcceptOnlyProcess(delayMs = 0): Promise<AcceptOnlyService> {
  const service = await startServiceProcess<{ url: string; token: string }>("./accept-only-process.ts", [
    String(delayMs),
  ]);
  return {
    ...service.info,
    pid: service.pid,
    stats: () => service.call<AcceptOnlyStats>("stats"),
    reset: () => service.call<void>("reset"),
    close: () => service.close(),
  };
}

/** The ws proxy (infra/ws-proxy.ts) in its own process, with its delay per round trip. */
export interface WsProxyService {
  /** `127.0.0.1:<port>`, for configureNeonForWsProxy. */
  address: string;
  pid: number;
  stats(): Promise<WsProxyStats>;
  close(): Promise<void>;
}

export async function startWsProxyProcess(delayMs = 0): Promise<WsProxyService> {
  const service = await startServiceProcess<{ address: string }>("./ws-proxy-process.ts", [String(delayMs)]);
  return {
    address: service.info.address,
    pid: service.pid,
    stats: () => service.call<WsProxyStats>("stats"),
    close: () => service.close(),
  };
}
