// Phase 12 (issue 11 item 8): the production-shaped pass (phase 11) with the Worker
// far from its Neon region and next to it, QStash's delay the same at both. A pass
// is 2 database round trips and 1 QStash request, and every invocation first opens
// its own connection, so the database's distance is paid several times per pass;
// this phase measures by how much, and counts the round trips (ws proxy) so the
// figures read as round trips × RTT (ADR 0017).
import { configureNeonForWsProxy } from "../../infra/ws-proxy.ts";
import type { BenchContext } from "../support/context.ts";
import {
  PLACEMENTS,
  explainedByRoundTrips,
  farOverNear,
  placementOrder,
  type Placement,
} from "../support/placement.ts";
import { log } from "../support/progress.ts";
import { startAcceptOnlyProcess, startWsProxyProcess, type WsProxyService } from "../support/service.ts";
import { summarize, type Summary } from "../support/stats.ts";
import {
  fullPasses,
  instrumentedDrain,
  measureConnect,
  pipelinedConnectOf,
  type ProductionPass,
} from "./production.ts";

/** Connections timed per placement and repetition: one alone swings with a burst of load. */
const CONNECT_SAMPLES = 5;

/** One placement's figures; Summaries are over repetitions. */
export interface PlacementRun {
  /** Added to every database round trip. */
  databaseRttMs: number;
  /** Per repetition: median full pass (batch 200, two subscriptions). */
  passMs: Summary;
  /** Per repetition: median database round trips per full pass (proxy-counted). */
  roundTripsPerPass: Summary;
  /** QStash requests per full pass over all repetitions; its chunks go out together, so one wait. */
  qstashRequestsPerPass: { min: number; max: number };
  /** round trips × RTT + QStash delay: what distance alone costs a pass. */
  passFloorMs: number;
  /**
   * Per repetition: median of CONNECT_SAMPLES fresh connections with their first
   * `SELECT 1`, which every invocation pays before its first statement.
   */
  connectMs: Summary;
  /** Round trips before that first query could be sent. */
  connectRoundTrips: number;
}

export interface PlacementResult {
  qstashMs: number;
  /** Whether this database took the pipelined connect (password auth, as Neon). */
  pipelinedConnect: boolean;
  /** Backlog each drain starts from. */
  events: number;
  farEdge: PlacementRun;
  nearDatabase: PlacementRun;
  /** Per-repetition ratios far edge / near the database. */
  farOverNear: { passMs: Summary; connectMs: Summary };
  /** (far − near pass) / (round trips × RTT difference): 1 when distance explains it all. */
  passExplainedByRoundTrips: Summary;
  raw: Record<Placement, ProductionPass[][]>;
}

export async function placement(ctx: BenchContext): Promise<PlacementResult> {
  const { rtts } = ctx;
  const qstashMs = ctx.delays.qstashMs;
  const events = ctx.sizes.placementBacklog;
  const proxies = {} as Record<Placement, WsProxyService>;
  const qstash = await startAcceptOnlyProcess(qstashMs);
  try {
    for (const p of PLACEMENTS) proxies[p] = await startWsProxyProcess(rtts[p]);
    const pipelinedConnect = await pipelinedConnectOf(ctx.db.url);
    const passes: Record<Placement, ProductionPass[][]> = { farEdge: [], nearDatabase: [] };
    const connects: Record<Placement, { ms: number; roundTrips: number }[]> = {
      farEdge: [],
      nearDatabase: [],
    };
    for (let rep = 1; rep <= ctx.reps; rep++) {
      for (const p of placementOrder(rep)) {
        configureNeonForWsProxy(proxies[p], pipelinedConnect);
        const samples = [];
        for (let i = 0; i < CONNECT_SAMPLES; i++) samples.push(await measureConnect(proxies[p], ctx.db.url));
        const connect = {
          ms: summarize(samples.map((c) => c.ms)).median,
          roundTrips: Math.max(...samples.map((c) => c.roundTrips)),
        };
        connects[p].push(connect);
        const drain = await instrumentedDrain(ctx, proxies[p], qstash, events);
        passes[p].push(drain);
        const full = fullPasses(ctx, drain);
        log(
          `placement rep ${rep}/${ctx.reps} ${p} (+${rtts[p]} ms per database round trip, ` +
            `+${qstashMs} ms per QStash request): full pass ` +
            `${summarize(full.map((x) => x.ms)).median.toFixed(1)} ms, round trips per pass ` +
            `${[...new Set(full.map((x) => x.roundTrips))].join("/")}, connect ${connect.ms.toFixed(1)} ms ` +
            `(${connect.roundTrips} round trip(s) before the first query)`,
        );
      }
    }
    const run = (p: Placement): PlacementRun => {
      const perRep = (pick: (x: ProductionPass) => number) =>
        summarize(passes[p].map((rep) => summarize(fullPasses(ctx, rep).map(pick)).median));
      const allFull = passes[p].flatMap((rep) => fullPasses(ctx, rep));
      const roundTripsPerPass = perRep((x) => x.roundTrips);
      return {
        databaseRttMs: rtts[p],
        passMs: perRep((x) => x.ms),
        roundTripsPerPass,
        qstashRequestsPerPass: {
          min: Math.min(...allFull.map((x) => x.qstashRequests)),
          max: Math.max(...allFull.map((x) => x.qstashRequests)),
        },
        passFloorMs: roundTripsPerPass.median * rtts[p] + qstashMs,
        connectMs: summarize(connects[p].map((c) => c.ms)),
        connectRoundTrips: Math.max(...connects[p].map((c) => c.roundTrips)),
      };
    };
    const farEdge = run("farEdge");
    const nearDatabase = run("nearDatabase");
    return {
      qstashMs,
      pipelinedConnect,
      events,
      farEdge,
      nearDatabase,
      farOverNear: {
        passMs: farOverNear(farEdge.passMs, nearDatabase.passMs),
        connectMs: farOverNear(farEdge.connectMs, nearDatabase.connectMs),
      },
      passExplainedByRoundTrips: explainedByRoundTrips(
        farEdge.passMs,
        nearDatabase.passMs,
        farEdge.roundTripsPerPass,
        rtts,
      ),
      raw: passes,
    };
  } finally {
    await Promise.all([qstash.close(), ...Object.values(proxies).map((p) => p.close())]);
  }
}
