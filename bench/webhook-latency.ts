// Time from a note write to the webhook's arrival at a receiver, through a running
// `npm run dev` (relay kick → QStash dev → webhook.fanout → webhook.deliver → POST).
// Writes one note at a time, so each figure is one event's journey on an idle stack,
// not a throughput test. Not a test: it asserts nothing, it measures.
//
//   npm run dev                                  # in another terminal
//   npx tsx bench/webhook-latency.ts [writes]    # default 200
//
// WORKER_URL (default http://127.0.0.1:8787) and ADMIN_TOKEN (default: the one
// `npm run dev` keeps in .dev/secrets.json) name the stack. With the operator token
// it makes an API key of a scope of its own for the writes (domain routes take only
// API keys) and a webhook endpoint in that scope, and revokes and deletes both at
// the end.
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { distribution } from "./support/stats.ts";

const writes = Number(process.argv[2] ?? 200);
if (!Number.isInteger(writes) || writes < 1 || writes > 10_000) throw new Error("writes must be 1..10000");
const worker = (process.env.WORKER_URL ?? "http://127.0.0.1:8787").replace(/\/+$/, "");
const adminToken =
  process.env.ADMIN_TOKEN ??
  (
    JSON.parse(readFileSync(new URL("../.dev/secrets.json", import.meta.url), "utf8")) as {
      ADMIN_TOKEN: string;
    }
  ).ADMIN_TOKEN;
const PER_WRITE_TIMEOUT_MS = 30_000;

// event id → when its webhook arrived (verified), and who is waiting for it.
const arrived = new Map<string, number>();
const waiting = new Map<string, () => void>();
// Set once the endpoint exists; the receiver must listen first, since its URL is part of the endpoint.
const secret: { webhook?: Webhook } = {};
let rejected = 0;

const receiver = http.createServer((req, res) => {
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const at = performance.now();
    try {
      secret.webhook!.verify(body, req.headers as Record<string, string>);
    } catch {
      rejected++;
      res.writeHead(400).end();
      return;
    }
    const id = String(req.headers["webhook-id"]);
    if (!arrived.has(id)) arrived.set(id, at);
    waiting.get(id)?.();
    res.writeHead(204).end();
  });
});
await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/bench`;

async function api(method: string, path: string, body?: unknown, token = adminToken) {
  const res = await fetch(`${worker}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

// Its own scope, so only this run's notes reach the endpoint and no other endpoint gets them.
const scope = `bench-${crypto.randomUUID()}`;
const minted = await api("POST", "/admin/api-keys", { scope, name: "bench/webhook-latency.ts" });
const apiKey: string = minted.key;
const created = await api("POST", "/admin/webhooks/endpoints", {
  url: receiverUrl,
  types: ["corpus.note.created"],
  scope,
  description: "bench/webhook-latency.ts",
});
secret.webhook = new Webhook(created.secret);
const endpointId: string = created.endpoint.id;

const endToEnd: number[] = [];
const writeOnly: number[] = [];
let lost = 0;
try {
  for (let i = 0; i < writes; i++) {
    const started = performance.now();
    const note = await api("POST", "/notes", { title: `latency ${i}` }, apiKey);
    writeOnly.push(performance.now() - started);
    const eventId: string = note.events[0].id;
    const got = await new Promise<boolean>((resolve) => {
      if (arrived.has(eventId)) return resolve(true);
      const timer = setTimeout(() => resolve(false), PER_WRITE_TIMEOUT_MS);
      waiting.set(eventId, () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    waiting.delete(eventId);
    if (got) endToEnd.push(arrived.get(eventId)! - started);
    else lost++;
    if ((i + 1) % 50 === 0) console.log(`… ${i + 1}/${writes}`);
  }
} finally {
  await api("DELETE", `/admin/webhooks/endpoints/${endpointId}`).catch((e: Error) =>
    console.error(`could not delete the bench endpoint ${endpointId}: ${e.message}`),
  );
  await api("DELETE", `/admin/api-keys/${minted.apiKey.id}`).catch((e: Error) =>
    console.error(`could not revoke the bench API key ${minted.apiKey.id}: ${e.message}`),
  );
  receiver.close();
}

const ms = (n: number) => `${n.toFixed(0)} ms`;
const show = (name: string, samples: number[]) => {
  const d = distribution(samples);
  console.log(`${name}: n=${d.count} p50 ${ms(d.p50)}  p95 ${ms(d.p95)}  p99 ${ms(d.p99)}  max ${ms(d.max)}`);
};
console.log(`\n${writes} sequential note writes against ${worker}`);
show("write answered (POST /notes)", writeOnly);
if (endToEnd.length > 0) show("write → verified webhook POST at the receiver", endToEnd);
console.log(`not arrived within ${PER_WRITE_TIMEOUT_MS / 1000} s: ${lost}; failed verification: ${rejected}`);
