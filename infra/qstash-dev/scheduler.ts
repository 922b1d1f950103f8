import type { MessageRecord } from "./types.ts";

/** setTimeout's ceiling; later wake-ups are simply re-armed. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Decides *when* each waiting message gets its next attempt: not before its
 * readyAt, not while delivery is paused, and within its flow-control key's
 * parallelism and rate. Attempts run concurrently (a slow destination holds only
 * its own slot); one timer covers the earliest future wake-up.
 */
export class Scheduler {
  private readonly waiting = new Set<MessageRecord>();
  private readonly active = new Map<string, number>(); // flow-control key → in-flight attempts
  private readonly starts = new Map<string, number[]>(); // flow-control key → recent start times (rate)
  private readonly running = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private paused = false;
  private closed = false;

  constructor(private readonly runAttempt: (message: MessageRecord) => Promise<void>) {}

  schedule(message: MessageRecord): void {
    if (this.closed) return;
    this.waiting.add(message);
    this.pump();
  }

  /** Drops a waiting message (cancel / reset); an attempt already running is not interrupted. */
  unschedule(message: MessageRecord): boolean {
    const removed = this.waiting.delete(message);
    if (removed) this.pump();
    return removed;
  }

  pause(): void {
    this.paused = true;
    this.pump();
  }

  resume(): void {
    this.paused = false;
    this.pump();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** Number of messages waiting for an attempt (not counting running ones). */
  get waitingCount(): number {
    return this.waiting.size;
  }

  clear(): void {
    this.waiting.clear();
    this.pump();
  }

  /** Stops scheduling and waits for running attempts (which the caller has aborted) to settle. */
  async close(): Promise<void> {
    this.closed = true;
    this.waiting.clear();
    clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.allSettled([...this.running]);
  }

  private pump(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed || this.paused) return;
    const now = Date.now();
    let nextWake = Infinity;
    // FIFO by readyAt within the whole set, so a flow-control key serves its oldest message first.
    const ordered = [...this.waiting].sort((a, b) => a.readyAt - b.readyAt || a.createdAt - b.createdAt);
    for (const message of ordered) {
      if (message.readyAt > now) {
        nextWake = Math.min(nextWake, message.readyAt);
        continue;
      }
      const blockedUntil = this.flowControlBlock(message, now);
      if (blockedUntil === "slot") continue; // woken again when an attempt with this key finishes
      if (blockedUntil !== undefined) {
        nextWake = Math.min(nextWake, blockedUntil);
        continue;
      }
      this.start(message, now);
    }
    if (nextWake !== Infinity) {
      this.timer = setTimeout(() => this.pump(), Math.min(MAX_TIMER_MS, Math.max(0, nextWake - now)));
    }
  }

  /** undefined = may start now; "slot" = wait for parallelism; number = rate window reopens then. */
  private flowControlBlock(message: MessageRecord, now: number): undefined | "slot" | number {
    const control = message.flowControl;
    if (!control) return undefined;
    if (control.parallelism !== undefined && (this.active.get(control.key) ?? 0) >= control.parallelism) {
      return "slot";
    }
    if (control.rate !== undefined) {
      const recent = (this.starts.get(control.key) ?? []).filter((t) => t > now - control.periodMs);
      this.starts.set(control.key, recent);
      if (recent.length >= control.rate) return recent[0]! + control.periodMs;
    }
    return undefined;
  }

  private start(message: MessageRecord, now: number): void {
    this.waiting.delete(message);
    const key = message.flowControl?.key;
    if (key !== undefined) {
      this.active.set(key, (this.active.get(key) ?? 0) + 1);
      const starts = this.starts.get(key) ?? [];
      starts.push(now);
      this.starts.set(key, starts);
    }
    const run = this.runAttempt(message)
      .catch(() => {
        // runAttempt records its own failures; nothing may escape into an unhandled rejection.
      })
      .finally(() => {
        this.running.delete(run);
        if (key !== undefined) this.active.set(key, (this.active.get(key) ?? 1) - 1);
        this.pump();
      });
    this.running.add(run);
  }
}
