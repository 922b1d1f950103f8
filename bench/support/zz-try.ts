import { Pool } from "@neondatabase/serverless";
import { startWsProxyProcess, startAcceptOnlyProcess } from "./service.ts";
import { configureNeonForWsProxy } from "../../infra/ws-proxy.ts";
import { createQStashPublisher, runPass } from "../../src/outbox/index.ts";
import { benchSubscriptions, PUBLIC_URL } from "./subscriptions.ts";
import { openBenchDatabase, seedBacklog, settle } from "./db.ts";
const db = await openBenchDatabase();
const proxy = await startWsProxyProcess(10);
const q = await startAcceptOnlyProcess(30);
configureNeonForWsProxy(proxy, false);
await seedBacklog(db.admin, 1000);
await settle(db.admin);
const pool = new Pool({ connectionString: db.url, max: 1 });
console.log("select", (await pool.query("SELECT 1 AS x")).rows, await proxy.stats());
const publisher = createQStashPublisher({ baseUrl: q.url, token: q.token, publicUrl: PUBLIC_URL });
for (let i = 0; i < 3; i++) {
  const t = performance.now();
  const pass = await Promise.race([
    runPass({ pool, publisher, subscriptions: benchSubscriptions }),
    new Promise((r) => setTimeout(() => r("timeout"), 5000)),
  ]);
  console.log(pass, performance.now() - t, await proxy.stats(), await q.stats());
}
await pool.end();
await proxy.close();
await q.close();
await db.close();
process.exit(0);
