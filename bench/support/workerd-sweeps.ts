/**
 * Issue 11 item 4's concurrent relays as a deployment runs them: the Worker's own
 * cron sweep (`GET /__scheduled`) in workerd, through the Neon driver and the local
 * stack's ws proxy (+`databaseMs` per round trip) and the real QStash SDK to an
 * accept-only endpoint in its own process (+`qstashMs` per request). One sweep
 * drains a backlog, then `count` sweeps started at once drain the same backlog
 * again: concurrent invocations of one Worker share its isolate, as four Node
 * relays share one process in the production phase. Used by `npm run bench`
 * (production phase) and `npm run bench:workerd`.
 *
 * The backlog is events of type `corpus.note.updated`, runs of 4 sharing a subject,
 * so the reference app's `corpus.index` coalesces (1.25 jobs per event). A drain ends
 * when no claimable row is left (polled every 25 ms), so the sweeps' maintenance
 * afterwards is not counted.
 */
import type pg from "pg";
import type { WorkerdStack } from "../../infra/workerd-stack.ts";
import { resetOutbox, seedBacklog, settle, unfanned } from "./db.ts";
import { cpuSample } from "./process-cpu.ts";
import { startAcceptOnlyProcess, type AcceptOnlyService } from "./service.ts";
import { workerBindings } from "./worker-bindings.ts";

export const SWEEP = "/__scheduled?cron=*+*+*+*+*";
/** The reference app's event type its corpus index coalesces on. */
export const SWEEP_EVENT_TYPE = "corpus.note.updated";

/** The outbox emptied, `n` events seeded, vacuumed and checkpointed. */
export async function freshSweepBacklog(admin: pg.Pool, n: number): Promise<void> {
  await resetOutbox(admin);
  await seedBacklog(admin, n, { type: SWEEP_EVENT_TYPE, subjects: "random" });
  await settle(admin);
}

export interface SweepsDrain {
  sweeps: number;
  ms: number;
  eventsPerSecond: number;
  /** workerd CPU per 1,000 events over the drain, the sweeps' maintenance included. */
  workerdCpuPer1k: number;
}

/** A Worker behind production-shaped delays, for sweepsAtOnce. */
export interface DelayedWorker {
  stack: WorkerdStack;
  close(): Promise<void>;
}

export async function startDelayedWorker(options: {
  databaseUrl: string;
  databaseMs: number;
  qstashMs: number;
}): Promise<DelayedWorker> {
  // Imported here: wrangler is heavy, and `npm run bench` needs it only for this.
  const { startWorkerdStack } = await import("../../infra/workerd-stack.ts");
  const delayed: AcceptOnlyService = await startAcceptOnlyProcess(options.qstashMs);
  try {
    const stack = await startWorkerdStack({
      databaseUrl: options.databaseUrl,
      proxy: { delayMs: options.databaseMs },
      bindings: workerBindings(),
      overrides: { QSTASH_URL: delayed.url, QSTASH_TOKEN: delayed.token },
    });
    return {
      stack,
      async close() {
        await stack.close();
        await delayed.close();
      },
    };
  } catch (error) {
    await delayed.close();
    throw error;
  }
}

/**
 * Resolves when no claimable row is left: the drain's end, whatever the sweeps do
 * next. Rejects once `signal` aborts, so a drain that failed does not poll forever.
 */
async function drainedAt(admin: pg.Pool, signal: AbortSignal): Promise<number> {
  for (;;) {
    signal.throwIfAborted();
    const { rowCount } = await admin.query(
      "SELECT 1 FROM events WHERE fanned_out_at IS NULL AND poisoned_at IS NULL LIMIT 1",
    );
    if (!rowCount) return performance.now();
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** `count` cron sweeps started at once drain a fresh backlog of `events`. */
export async function sweepsAtOnce(
  worker: DelayedWorker,
  admin: pg.Pool,
  events: number,
  count: number,
): Promise<SweepsDrain> {
  await freshSweepBacklog(admin, events);
  const before = cpuSample();
  const started = performance.now();
  const polling = new AbortController();
  const done = drainedAt(admin, polling.signal);
  try {
    const answers = await Promise.all(
      Array.from({ length: count }, async () => {
        const res = await worker.stack.fetch(SWEEP);
        return { ok: res.ok, status: res.status, text: await res.text() };
      }),
    );
    // Checked before waiting for the drain's end, which would never come: every sweep
    // has returned, so rows still unfanned (a failed sweep, a publish backing off) stay.
    const failed = answers.find((a) => !a.ok);
    if (failed) throw new Error(`a sweep answered ${failed.status}: ${failed.text}`);
    const left = await unfanned(admin);
    if (left !== 0) throw new Error(`${count} sweep(s) left ${left} events unfanned`);
  } catch (error) {
    polling.abort();
    await done.catch(() => undefined);
    throw error;
  }
  const ended = await done;
  // The pools end in waitUntil; give them a moment so their CPU is counted here.
  await new Promise((r) => setTimeout(r, 300));
  const cpuMs = cpuSample().workerdMs - before.workerdMs;
  const ms = ended - started;
  return {
    sweeps: count,
    ms,
    eventsPerSecond: (events / ms) * 1000,
    workerdCpuPer1k: (cpuMs / events) * 1000,
  };
}

/** One sweep, then `count` at once, in an order that alternates by repetition (1-based). */
export async function oneAndMany(
  worker: DelayedWorker,
  admin: pg.Pool,
  events: number,
  count: number,
  rep: number,
): Promise<{ one: SweepsDrain; many: SweepsDrain }> {
  // Alternate which goes first, so neither always meets a just-vacuumed table.
  const oneFirst = rep % 2 === 1;
  const a = await sweepsAtOnce(worker, admin, events, oneFirst ? 1 : count);
  const b = await sweepsAtOnce(worker, admin, events, oneFirst ? count : 1);
  return oneFirst ? { one: a, many: b } : { one: b, many: a };
}
