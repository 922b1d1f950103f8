/**
 * `npx tsx bench/profile-write.ts [--writes <n>] [--concurrency <n>] [--out <dir>] [--worker <checkout>]`
 *
 * Where a write with its receipt spends CPU, by process (issue 11 item 7): the
 * stack bench:write runs (bench/write-receipt.ts), with workerd's inspector open,
 * then `GET /healthz` and `POST /notes` + `Prefer: wait=5` under the same load
 * (QStash holding deliveries), each with a V8 CPU profile of workerd (DevTools
 * protocol over the inspector) and of this Node process (pooler, QStash dev server,
 * load; node:inspector). Writes `<out>/{healthz,notes}.{workerd,node}.cpuprofile`
 * (open them in Chrome DevTools) and prints the self time per request by package.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { ensureDevApiKey, newDevApiKey } from "../infra/dev-api-key.ts";
import { startWorkerdStack } from "../infra/workerd-stack.ts";
import { freePort } from "../src/node/postgres.ts";
import { openBenchDatabase } from "./support/db.ts";
import { runLoad } from "./support/load.ts";
import { cpuPer, cpuSample } from "./support/process-cpu.ts";
import { log, stopOnSignal } from "./support/progress.ts";
import { workerBindings } from "./support/worker-bindings.ts";

const { values } = parseArgs({
  options: {
    writes: { type: "string", default: "400" },
    concurrency: { type: "string", default: "20" },
    out: { type: "string", default: "profiles" },
    worker: { type: "string" },
  },
});
const writes = Number(values.writes);
const concurrency = Number(values.concurrency);
const out = resolve(values.out ?? "profiles");
await mkdir(out, { recursive: true });

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** A DevTools protocol session on workerd's inspector (the first target it lists). */
async function workerdInspector(port: number) {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as {
    webSocketDebuggerUrl: string;
  }[];
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((ok, fail) => ws.once("open", ok).once("error", fail));
  let nextId = 1;
  const pending = new Map<number, (r: unknown) => void>();
  const scripts: { scriptId: string; url: string }[] = [];
  ws.on("message", (data) => {
    const msg = JSON.parse(String(data)) as {
      id?: number;
      result?: unknown;
      method?: string;
      params?: { scriptId: string; url: string };
    };
    if (msg.id !== undefined) pending.get(msg.id)?.(msg.result);
    if (msg.method === "Debugger.scriptParsed" && msg.params) scripts.push(msg.params);
  });
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((ok) => {
      const id = nextId++;
      pending.set(id, ok);
      ws.send(JSON.stringify({ id, method, params }));
    });
  /** The bundle's source, whose `// path` comments (esbuild's) say which module a line is in. */
  const bundleSource = async () => {
    await send("Debugger.enable");
    await new Promise((r) => setTimeout(r, 500));
    const bundle = scripts.find((s) => s.url.endsWith("index.js"));
    if (!bundle) return "";
    const r = (await send("Debugger.getScriptSource", { scriptId: bundle.scriptId })) as {
      scriptSource: string;
    };
    await send("Debugger.disable");
    return r.scriptSource;
  };
  return { send, bundleSource, close: () => ws.close() };
}

const db = await openBenchDatabase();
const apiKey = newDevApiKey();
await ensureDevApiKey(db.url, apiKey);
const inspectorPort = await freePort();
let started: Awaited<ReturnType<typeof startWorkerdStack>> | undefined;
const stop = stopOnSignal(async () => {
  await started?.close();
  await db.close();
});
const stack = (started = await startWorkerdStack({
  databaseUrl: db.url,
  inspectorPort,
  ...(values.worker ? { config: resolve(values.worker, "wrangler.toml") } : {}),
  bindings: workerBindings(),
}));
try {
  const healthz = async () => {
    const res = await stack.fetch("/healthz");
    await res.text();
    return res.status === 200;
  };
  const note = async (i: number) => {
    const res = await stack.fetch("/notes", {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", prefer: "wait=5" },
      body: JSON.stringify({ title: `profile note ${i}`, body: "a write and its receipt" }),
    });
    await res.text();
    return res.status === 201;
  };
  stack.qstash.pauseDelivery();
  await runLoad(100, concurrency, healthz);
  await runLoad(100, concurrency, note);

  const inspector = await workerdInspector(inspectorPort);
  const node = new Session();
  node.connect();
  await inspector.send("Profiler.enable");
  await inspector.send("Profiler.setSamplingInterval", { interval: 500 });
  await node.post("Profiler.enable");
  await node.post("Profiler.setSamplingInterval", { interval: 500 });

  const profiles: [string, Profile, Profile][] = [];
  for (const [name, send] of [
    ["healthz", healthz],
    ["notes", note],
  ] as const) {
    await new Promise((r) => setTimeout(r, 1_000));
    await inspector.send("Profiler.start");
    await node.post("Profiler.start");
    const before = cpuSample();
    const r = await runLoad(writes, concurrency, send);
    const cpu = cpuPer(before, cpuSample(), writes);
    const w = ((await inspector.send("Profiler.stop")) as { profile: Profile }).profile;
    const n = (await node.post("Profiler.stop")).profile as unknown as Profile;
    await writeFile(`${out}/${name}.workerd.cpuprofile`, JSON.stringify(w));
    await writeFile(`${out}/${name}.node.cpuprofile`, JSON.stringify(n));
    log(
      `${name}: ${r.perSecond.toFixed(1)}/s, failed ${r.failed}; CPU per request workerd ${cpu.workerdMs.toFixed(2)}, ` +
        `Postgres ${cpu.postgresMs.toFixed(2)}, Node ${cpu.nodeMs.toFixed(2)} ms`,
    );
    profiles.push([name, w, n]);
  }
  const modules = moduleOfLine(await inspector.bundleSource());
  for (const [name, w, n] of profiles) {
    process.stdout.write(
      `\n${name}, workerd JS self time per request (ms):\n${bySource(w, writes, modules)}\n`,
    );
    process.stdout.write(`${name}, Node JS self time per request (ms):\n${bySource(n, writes)}\n`);
  }
  inspector.close();
  node.disconnect();
} finally {
  await stop();
}

/** Self time per request, grouped by package (node_modules/<name>) or by the function for the rest. */
function bySource(p: Profile, requests: number, modules?: (line: number) => string | undefined): string {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  // Each sample counts the profile's mean interval: a sample's own time delta is the
  // gap since the previous one, which after an idle stretch is long and would charge
  // the idle time to whatever ran first.
  const interval = (p.endTime - p.startTime) / Math.max(1, p.samples.length);
  for (const id of p.samples) self.set(id, (self.get(id) ?? 0) + interval);
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const groupOf = (n: ProfileNode): string | undefined => {
    const url =
      (modules && n.callFrame.url.endsWith("index.js") && modules(n.callFrame.lineNumber)) || n.callFrame.url;
    if (!url) return undefined;
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
    return pkg ?? url.replace(/^.*\/(src|infra|bench)\//, "$1/");
  };
  const groups = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    // Native work (a socket write, JSON.parse) is charged to the nearest JS caller's module.
    let group: string | undefined;
    for (let at: number | undefined = id; at !== undefined && !group; at = parent.get(at))
      group = groupOf(byId.get(at)!);
    group ??= `(${n.callFrame.functionName || "native"})`;
    groups.set(group, (groups.get(group) ?? 0) + us);
    const fn = `${n.callFrame.functionName || "(anonymous)"} ${n.callFrame.url.replace(/^.*\//, "")}:${n.callFrame.lineNumber + 1}`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
  }
  const top = (m: Map<string, number>, k: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([g, us]) => `  ${(us / 1000 / requests).toFixed(3).padStart(7)}  ${g}`)
      .join("\n");
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  return `  total sampled ${(total / 1000 / requests).toFixed(2)} ms\n${top(groups, 14)}\n  top functions:\n${top(fns, 25)}`;
}

/** Line (0-based) of the bundle → the module esbuild's last `// path` comment before it names. */
function moduleOfLine(source: string): (line: number) => string | undefined {
  const starts: [number, string][] = [];
  source.split("\n").forEach((text, i) => {
    const m = /^\/\/ (\S+\.(?:js|mjs|cjs|ts))$/.exec(text);
    if (m) starts.push([i, m[1]!]);
  });
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found: string | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid]![0] <= line) {
        found = starts[mid]![1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}
