import type { FlowControl, FlowControlInfo, MessageRecord } from "./types.ts";

/** setTimeout's ceiling; later wake-ups are simply re-armed. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Messages without a flow-control key share no limits; they queue under this internal key. */
const NO_KEY = Symbol("no flow-control key");
type QueueKey = string | typeof NO_KEY;

/**
 * Decides *when* each waiting message gets its next attempt: not before its
 * readyAt, not while delivery is paused, and within its flow-control key's
 * parallelism and rate. Attempts run concurrently (a slow destination holds only
 * its own slot); one timer covers the earliest future wake-up.
 *
 * Messages not yet due sit in a min-heap by readyAt; due ones move, in readyAt
 * order, to a FIFO per flow-control key, so each pump costs O(due · log n + keys),
 * not a sort of everything (benchmarks push thousands of messages through here).
 */
export class Scheduler {
  /** Membership: a message is waiting iff it is in this set (heap/queue entries are removed lazily). */
  private readonly waiting = new Set<MessageRecord>();
  private readonly future = new MinHeap();
  private readonly due = new Map<QueueKey, MessageRecord[]>();
  private readonly active = new Map<string, number>(); // flow-control key → in-flight attempts
  private readonly starts = new Map<string, number[]>(); // flow-control key → recent start times (rate)
  private readonly running = new Set<Promise<void>>();
  /** Every flow-control key a message was scheduled with, and its latest settings (QStash's GET /v2/flowControl). */
  private readonly controls = new Map<string, FlowControl>();
  private timer: NodeJS.Timeout | undefined;
  private paused = false;
  private closed = false;

  /** `startedAt` is the scheduler's clock reading, so recorded start times match the rate window exactly. */
  constructor(private readonly runAttempt: (message: MessageRecord, startedAt: number) => Promise<void>) {}

  schedule(message: MessageRecord): void {
    if (this.closed || this.waiting.has(message)) return;
    this.waiting.add(message);
    if (message.flowControl) this.controls.set(message.flowControl.key, message.flowControl);
    this.future.push(message);
    this.pump();
  }

  /** Drops a waiting message (cancel / reset); an attempt already running is not interrupted. */
  unschedule(message: MessageRecord): boolean {
    return this.waiting.delete(message);
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

  /**
   * One flow-control key as QStash's `GET /v2/flowControl/<key>` shows it, or undefined
   * for a key no message has had since start-up (QStash answers 404). The wait list is
   * the key's messages that are due and not started: held by its parallelism or rate,
   * or by a paused delivery (QStash keeps a paused key's messages in its wait list too).
   */
  flowControlInfo(key: string, now = Date.now()): FlowControlInfo | undefined {
    const control = this.controls.get(key);
    if (!control) return undefined;
    let waitListSize = 0;
    for (const message of this.waiting) {
      if (message.flowControl?.key === key && message.readyAt <= now) waitListSize++;
    }
    const recent = (this.starts.get(key) ?? []).filter((t) => t > now - control.periodMs);
    return {
      flowControlKey: key,
      waitListSize,
      parallelismMax: control.parallelism ?? 0,
      parallelismCount: this.active.get(key) ?? 0,
      rateMax: control.rate ?? 0,
      rateCount: recent.length,
      ratePeriod: control.periodMs / 1000,
      ratePeriodStart: Math.floor((recent[0] ?? now) / 1000),
      isPaused: this.paused,
      isPinnedParallelism: false,
      isPinnedRate: false,
    };
  }

  /** Every key flowControlInfo knows, in the order first seen. */
  flowControlKeys(): string[] {
    return [...this.controls.keys()];
  }

  clear(): void {
    this.waiting.clear();
    this.controls.clear();
    this.future.clear();
    this.due.clear();
    this.pump();
  }

  /** Stops scheduling and waits for running attempts (which the caller has aborted) to settle. */
  async close(): Promise<void> {
    this.closed = true;
    this.clear();
    clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.allSettled([...this.running]);
  }

  private pump(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed || this.paused) return;
    const now = Date.now();

    for (let next = this.future.peek(); next && next.readyAt <= now; next = this.future.peek()) {
      this.future.pop();
      if (!this.waiting.has(next)) continue;
      const key: QueueKey = next.flowControl?.key ?? NO_KEY;
      const queue = this.due.get(key) ?? [];
      queue.push(next);
      this.due.set(key, queue);
    }

    let nextWake = this.nextFutureReadyAt() ?? Infinity;
    for (const [key, queue] of this.due) {
      while (queue.length > 0) {
        const message = queue[0]!;
        if (!this.waiting.has(message)) {
          queue.shift();
          continue;
        }
        const blocked = this.flowControlBlock(message, now);
        if (blocked === "slot") break; // woken again when an attempt with this key finishes
        if (blocked !== undefined) {
          nextWake = Math.min(nextWake, blocked);
          break;
        }
        queue.shift();
        this.start(message, now);
      }
      if (queue.length === 0) this.due.delete(key);
    }

    if (nextWake !== Infinity) {
      this.timer = setTimeout(() => this.pump(), Math.min(MAX_TIMER_MS, Math.max(0, nextWake - now)));
    }
  }

  /** readyAt of the earliest still-waiting future message, dropping stale heap entries on the way. */
  private nextFutureReadyAt(): number | undefined {
    for (let next = this.future.peek(); next; next = this.future.peek()) {
      if (this.waiting.has(next)) return next.readyAt;
      this.future.pop();
    }
    return undefined;
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
    const run = this.runAttempt(message, now)
      .catch(() => {
        // runAttempt records its own failures; nothing may escape into an unhandled rejection.
      })
      .finally(() => {
        this.running.delete(run);
        if (key !== undefined) {
          const left = (this.active.get(key) ?? 1) - 1;
          if (left > 0) this.active.set(key, left);
          else this.active.delete(key);
        }
        this.pump();
      });
    this.running.add(run);
  }
}

/** Binary min-heap of messages by (readyAt, createdAt): FIFO among equally-due messages. */
class MinHeap {
  private items: MessageRecord[] = [];

  peek(): MessageRecord | undefined {
    return this.items[0];
  }

  clear(): void {
    this.items = [];
  }

  push(message: MessageRecord): void {
    const items = this.items;
    items.push(message);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): MessageRecord | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < items.length && before(items[left]!, items[smallest]!)) smallest = left;
        if (right < items.length && before(items[right]!, items[smallest]!)) smallest = right;
        if (smallest === i) break;
        [items[i], items[smallest]] = [items[smallest]!, items[i]!];
        i = smallest;
      }
    }
    return top;
  }
}

function before(a: MessageRecord, b: MessageRecord): boolean {
  return a.readyAt < b.readyAt || (a.readyAt === b.readyAt && a.seq < b.seq);
}
