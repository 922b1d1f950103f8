/**
 * The relay in a Node process as the Worker runs it: the Neon driver through the
 * local stack's ws proxy and pooler, the reference app's subscriptions, and either
 * the QStash publisher (the real SDK) or the null publisher. A long-lived service
 * (service.ts), so its code is as warm as a reused Worker isolate's; each `qstash`
 * or `null` command opens a pool, drains until nothing is claimable and ends the
 * pool, as one cron sweep does, and answers with the CPU it took. argv[2] is a
 * NeonRelayInput. Used by bench/relay-workerd.ts.
 */
import { Pool } from "@neondatabase/serverless";
import { configureNeonForWsProxy } from "../../infra/ws-proxy.ts";
import {
  createNullPublisher,
  createQStashPublisher,
  deploymentLabel,
  drain,
  type Publisher,
} from "../../src/outbox/index.ts";
import { subscriptions } from "../../src/domain/subscriptions.ts";
import { cpuMsSince } from "./process-cpu.ts";
import { serveCommands } from "./service.ts";

export interface NeonRelayInput {
  /** The pooler's connection string, as the Worker's DATABASE_URL. */
  databaseUrl: string;
  /** The ws proxy, `127.0.0.1:<port>`. */
  proxyAddress: string;
  qstash: { url: string; token: string };
  /** The Worker's URL: jobs are addressed to it, as the Worker's own publisher does. */
  publicUrl: string;
}

export interface NeonRelayDrain {
  events: number;
  jobs: number;
  passes: number;
  ms: number;
  /** process.cpuUsage over the drain, connect and pool end included: user + system, ms. */
  cpuMs: number;
}

const input = JSON.parse(process.argv[2]!) as NeonRelayInput;
// The pooler always takes a pipelined connect, as Neon's pooled endpoint does.
configureNeonForWsProxy({ address: input.proxyAddress }, true);

async function drainWith(publisher: Publisher): Promise<NeonRelayDrain> {
  const cpu = process.cpuUsage();
  const started = performance.now();
  const pool = new Pool({ connectionString: input.databaseUrl, max: 3 });
  try {
    const result = await drain({ pool, publisher, subscriptions, budgetMs: 10 * 60_000, until: "empty" });
    if (result.stoppedBecause !== "drained") throw new Error(`drain stopped: ${result.stoppedBecause}`);
    await pool.end();
    const cpuMs = cpuMsSince(cpu);
    return {
      events: result.fanned,
      jobs: result.jobs,
      passes: result.passes,
      ms: performance.now() - started,
      cpuMs,
    };
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
}

serveCommands(
  {},
  {
    qstash: () =>
      drainWith(
        createQStashPublisher({
          baseUrl: input.qstash.url,
          token: input.qstash.token,
          publicUrl: input.publicUrl,
          label: deploymentLabel(input.publicUrl),
        }),
      ),
    null: () => drainWith(createNullPublisher()),
  },
  async () => undefined,
);
