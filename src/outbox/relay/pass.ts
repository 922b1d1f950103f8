import { PublishError, classifyPublishFailure, errorMessage } from "../errors.ts";
import type { Publisher } from "../publisher.ts";
import { positiveInt, results, send, type SqlClient, type SqlPool } from "../sql.ts";
import type { Subscription } from "../subscriptions.ts";
import type { Fanout } from "../schema.ts";
import type { Job, PublishedJob } from "../types.ts";
import { clearFailuresSql, recordFailureSql, type DbBackoff } from "./backoff.ts";
import { claim, claimText, readClaim, type Claim } from "./claim.ts";
import { markAndCommit, type RowOutcome } from "./mark.ts";
import { planBatch, type RowPlan } from "./plan.ts";
import { RELAY_POLICY, type ExponentialBackoff } from "./policy.ts";

export interface RelayOptions {
  pool: SqlPool;
  publisher: Publisher;
  subscriptions: readonly Subscription[];
  /** Rows claimed per pass; bounds the transaction, whatever the backlog. */
  batchSize?: number;
  /** After a failed pass, how many rows the next (`rows`) pass retries one by one, each its own publish request. */
  rowsPassSize?: number;
  /** One publish request may take this long before the pass gives up on it. */
  publishTimeoutMs?: number;
  /**
   * A whole pass may take this long. It must stay far inside QStash's 10-minute
   * deduplication window: a pass that dies after publishing is replayed with the
   * same deduplication ids, which QStash only drops inside that window.
   */
  passTimeoutMs?: number;
  /** QStash rejects larger messages; such an event fails on its own instead of failing the batch. */
  maxJobBytes?: number;
  /**
   * The relay-wide backoff after a failed pass (RELAY_POLICY.passBackoff by
   * default); the Worker takes its cap from RELAY_BACKOFF_CAP_SECONDS.
   */
  passBackoff?: ExponentialBackoff;
  /** Injected clock for tests; the database's clock otherwise. */
  now?: Date;
}

export interface PassResult {
  /** `batch`: all claimed rows published together; `rows`: retried one by one after a failed pass. */
  mode: "batch" | "rows" | "empty" | "backed-off";
  claimed: number;
  fanned: number;
  /** Rows that failed with an error of their own. */
  failed: number;
  poisoned: string[];
  jobs: number;
  /** Set when the relay is (now) backed off. */
  backedOffUntil: Date | null;
  /** The pass-level failure (an outage), when there was one. */
  error?: string;
  /** The claim came back full: more rows are probably waiting. */
  full: boolean;
  /**
   * The rows this pass marked fanned out, as the database now holds them, so a
   * write's kick can answer its receipt without reading them back (receipt.ts).
   */
  fannedEvents: FannedEvent[];
}

export interface FannedEvent {
  id: string;
  type: string;
  /** Exactly the fanout the mark wrote. */
  fanout: Fanout;
  /** The transaction's now(): the fanned_out_at the mark wrote. */
  fannedAt: Date;
}

/**
 * One bounded unit of relay work: claim, plan, publish, mark, commit.
 * Fan-out is exactly once per (event, subscription) because claim, publish and
 * mark share one transaction and every publish carries a deduplication id.
 * Database errors propagate (the transaction rolls back and nothing is lost);
 * publish failures are classified and recorded, never thrown.
 */
export async function runPass(options: RelayOptions): Promise<PassResult> {
  const session = await openPasses(options);
  try {
    return await session.run();
  } finally {
    await session.close();
  }
}

/** Passes one after another on one connection: what drain() runs. */
export interface PassSession {
  /**
   * One pass, on the claim the previous pass sent with its commit or on one of its
   * own. `another(full)` is asked just before the pass commits, after its publish:
   * true sends the next pass's claim after the COMMIT in the same round trip, so a
   * drain costs one round trip per pass instead of two (ADR 0022). A pass that
   * rolls back (nothing claimed, a failed publish) or records an outage asks nothing.
   */
  run(another?: (full: boolean) => boolean): Promise<PassResult>;
  /** The next pass is claimed already, its rows locked: run it, or close() rolls it back. */
  readonly claimed: boolean;
  /** Rolls back a claim no pass ran, and gives the connection back (dropped after an error). */
  close(): Promise<void>;
}

export async function openPasses(options: RelayOptions): Promise<PassSession> {
  const batchSize = positiveInt(options.batchSize ?? RELAY_POLICY.batchSize, "batchSize");
  const client = await options.pool.connect();
  let destroy = false;
  // The next query on a dropped connection fails with the real error; until then
  // the event must not go unheard.
  const onError = () => {
    destroy = true;
  };
  client.on?.("error", onError);
  let next: Claim | undefined;
  let closed = false;
  let failed = false;

  async function run(another: (full: boolean) => boolean = () => false): Promise<PassResult> {
    if (closed) throw new Error("the relay's pass session is closed");
    // Its connection is about to be dropped: whatever the caller does next needs a new one.
    if (failed) throw new Error("a pass of this session failed; open another");
    let passTimer: ReturnType<typeof setTimeout> | undefined;
    try {
      const claimed = next ?? (await claim(client, batchSize, options.now));
      next = undefined;
      const { state, events, at } = claimed;
      if (events.length === 0) {
        await send(client, "ROLLBACK");
        return {
          ...emptyResult(state.backedOff ? "backed-off" : "empty"),
          backedOffUntil: state.backedOff ? state.backoffUntil : null,
        };
      }
      // A timer cleared when the pass ends, not AbortSignal.timeout: those stay armed
      // (and keep their signals, and AbortSignal.any's, alive) for the whole minute
      // after a 10 ms pass, which a profile of a long drain showed as garbage
      // collection work growing with every pass.
      const deadline = timeoutController(options.passTimeoutMs ?? RELAY_POLICY.passTimeoutMs);
      passTimer = deadline.timer;
      const publish = (jobs: Job[]) => publishBounded(options, jobs, deadline.signal);
      const full = events.length === batchSize;
      // Called just before the commit is sent, with the pass's own `full`: "" or the
      // next pass's claim.
      const then = (passFull: boolean) => (another(passFull) ? claimText(batchSize, options.now) : "");
      const [result, following] =
        state.failures === 0
          ? await batchPass(client, options, events, publish, full, at, then)
          : await rowsPass(client, options, events, publish, full, at, then);
      next = following;
      return result;
    } catch (error) {
      // The connection may be gone (that is how a crash looks from here); the
      // transaction then rolls back on the server, and the rows are claimable again.
      destroy = true;
      failed = true;
      await send(client, "ROLLBACK").catch(() => undefined);
      throw error;
    } finally {
      clearTimeout(passTimer);
    }
  }

  return {
    run,
    get claimed() {
      return next !== undefined;
    },
    async close() {
      if (closed) return;
      closed = true;
      if (next !== undefined && !destroy) {
        next = undefined;
        // A claim nobody will run: its rows go back now rather than when the
        // connection is next used.
        await send(client, "ROLLBACK").catch(() => {
          destroy = true;
        });
      }
      client.off?.("error", onError);
      client.release(destroy);
    },
  };
}

type Publish = (jobs: Job[]) => Promise<PublishedJob[]>;
type Claimed = Claim["events"];

async function batchPass(
  client: SqlClient,
  options: RelayOptions,
  events: Claimed,
  publish: Publish,
  full: boolean,
  at: Date | null,
  then: (full: boolean) => string,
): Promise<[PassResult, Claim | undefined]> {
  const plans = planBatch(events, options.subscriptions, {
    coalesce: true,
    maxJobBytes: options.maxJobBytes ?? RELAY_POLICY.maxJobBytes,
  });
  const jobs = plans.flatMap((p) => p.jobs);
  let published: PublishedJob[];
  try {
    published = jobs.length > 0 ? await publish(jobs) : [];
  } catch (error) {
    // Whoever is at fault, a failed batch says nothing about any one row: roll back,
    // back off, and let the next pass retry these rows one by one to find out.
    const message = errorMessage(error);
    await send(client, "ROLLBACK");
    const [failed] = results<[DbBackoff]>(
      await send(client, recordFailureSql(message, options.now, options.passBackoff)),
    );
    const failure = failed?.rows[0];
    const result: PassResult = {
      ...emptyResult("batch"),
      claimed: events.length,
      full,
      error: message,
      backedOffUntil: failure?.backoff_until ?? null,
    };
    return [result, undefined];
  }
  // Indexed loops: as for-of in this async function they allocated an iterator per
  // row and a result per job, a few percent of what a pass allocated.
  let i = 0;
  for (let p = 0; p < plans.length; p++) {
    const plan = plans[p]!;
    for (let j = 0; j < plan.jobs.length; j++) recordPublished(plan, plan.jobs[j]!, published[i++]!);
  }
  const claimNext = then(full);
  const mark = await markAndCommit(
    client,
    plans.map(outcome),
    clearFailuresSql(options.now),
    options.now,
    claimNext,
  );
  const result: PassResult = {
    mode: "batch",
    claimed: events.length,
    fanned: mark.fanned,
    failed: mark.failed,
    poisoned: mark.poisoned,
    jobs: jobs.length,
    backedOffUntil: null,
    full,
    fannedEvents: fannedEvents(plans, at, mark.fanned),
  };
  return [result, claimNext ? readClaim(mark.then) : undefined];
}

/**
 * A `rows` pass, after a failed pass: publish each row on its own, so a row the transport rejects
 * fails alone (its attempts go up) and the rest go through. An outage stops the
 * pass: rows not yet tried stay untouched, and the backoff doubles.
 */
async function rowsPass(
  client: SqlClient,
  options: RelayOptions,
  events: Claimed,
  publish: Publish,
  full: boolean,
  at: Date | null,
  then: (full: boolean) => string,
): Promise<[PassResult, Claim | undefined]> {
  const limit = Math.min(events.length, options.rowsPassSize ?? RELAY_POLICY.rowsPassSize);
  const outcomes: RowOutcome[] = [];
  const tried: RowPlan[] = [];
  let outage: string | undefined;
  let jobs = 0;
  for (const event of events.slice(0, limit)) {
    const [plan] = planBatch([event], options.subscriptions, {
      coalesce: false,
      maxJobBytes: options.maxJobBytes ?? RELAY_POLICY.maxJobBytes,
    });
    if (!plan) continue;
    if (!plan.error && plan.jobs.length > 0) {
      try {
        const published = await publish(plan.jobs);
        plan.jobs.forEach((job, i) => recordPublished(plan, job, published[i]!));
        jobs += plan.jobs.length;
      } catch (error) {
        if (classifyPublishFailure(error) === "outage") {
          outage = errorMessage(error);
          break;
        }
        plan.error = errorMessage(error);
      }
    }
    outcomes.push(outcome(plan));
    tried.push(plan);
  }
  const stateSql = outage
    ? recordFailureSql(outage, options.now, options.passBackoff)
    : clearFailuresSql(options.now);
  // After an outage the relay is backed off: a claim now would find nothing.
  const claimNext = outage ? "" : then(full || limit < events.length);
  const mark = await markAndCommit(client, outcomes, stateSql, options.now, claimNext);
  const result: PassResult = {
    mode: "rows",
    claimed: events.length,
    fanned: mark.fanned,
    failed: mark.failed,
    poisoned: mark.poisoned,
    jobs,
    backedOffUntil: outage ? (mark.state[0]?.backoff_until ?? null) : null,
    ...(outage ? { error: outage } : {}),
    full: full || limit < events.length,
    fannedEvents: fannedEvents(tried, at, mark.fanned),
  };
  return [result, claimNext ? readClaim(mark.then) : undefined];
}

/**
 * What the mark wrote for the rows it fanned out. Empty when the claim did not
 * read the transaction's time, or when the mark's count disagrees (a row gone
 * meanwhile): a receipt then reads the rows, as it always could.
 */
function fannedEvents(plans: RowPlan[], at: Date | null, marked: number): FannedEvent[] {
  if (!at) return [];
  const fanned = plans.filter((p) => !p.error);
  if (fanned.length !== marked) return [];
  return fanned.map((p) => ({ id: p.event.id, type: p.event.type, fanout: p.fanout, fannedAt: at }));
}

function recordPublished(plan: RowPlan, job: Job, published: PublishedJob): void {
  plan.fanout[job.subscription] = published.deduplicated
    ? { messageId: published.messageId, deduplicated: true }
    : { messageId: published.messageId };
}

function outcome(plan: RowPlan): RowOutcome {
  if (!plan.error) return { seq: plan.event.seq, fanout: plan.fanout };
  return plan.permanent
    ? { seq: plan.event.seq, error: plan.error, permanent: true }
    : { seq: plan.event.seq, error: plan.error };
}

async function publishBounded(
  options: RelayOptions,
  jobs: Job[],
  deadline: AbortSignal,
): Promise<PublishedJob[]> {
  // One controller aborted by whichever comes first, the pass's deadline or this
  // request's own timeout; both listeners and the timer go when the request ends.
  const bounded = timeoutController(options.publishTimeoutMs ?? RELAY_POLICY.publishTimeoutMs);
  const onDeadline = () => bounded.controller.abort(deadline.reason);
  if (deadline.aborted) onDeadline();
  else deadline.addEventListener("abort", onDeadline, { once: true });
  const signal = bounded.signal;
  let published: PublishedJob[];
  try {
    // Raced here so a publisher that ignores its signal still cannot hold the pass
    // (and its row locks) open: whatever it sends later is deduplicated on replay.
    published = await raceAbort(options.publisher.publish(jobs, signal), signal);
  } finally {
    clearTimeout(bounded.timer);
    deadline.removeEventListener("abort", onDeadline);
  }
  if (published.length !== jobs.length) {
    throw new Error(`publisher answered ${published.length} results for ${jobs.length} jobs`);
  }
  return published;
}

/** Like AbortSignal.timeout (same TimeoutError reason), but its timer can be cleared. */
function timeoutController(ms: number): {
  controller: AbortController;
  signal: AbortSignal;
  timer: ReturnType<typeof setTimeout>;
} {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException(`signal timed out after ${ms} ms`, "TimeoutError")),
    ms,
  );
  return { controller, signal: controller.signal, timer };
}

function emptyResult(mode: PassResult["mode"]): PassResult {
  return {
    mode,
    claimed: 0,
    fanned: 0,
    failed: 0,
    poisoned: [],
    jobs: 0,
    backedOffUntil: null,
    full: false,
    fannedEvents: [],
  };
}

/**
 * `promise`, or a PublishError as soon as `signal` aborts. Exported for its test. The
 * promise is always handled: given a signal aborted already, a publisher that then
 * rejects (as fetch does) was left with no handler, an unhandled rejection.
 */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () =>
      reject(
        new PublishError(`publish gave up: ${errorMessage(signal.reason)}`, "outage", undefined, {
          cause: signal.reason,
        }),
      );
    if (signal.aborted) {
      promise.catch(() => undefined);
      return onAbort();
    }
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
