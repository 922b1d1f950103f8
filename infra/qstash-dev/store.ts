import { isSettled, type DlqEntry, type MessageRecord } from "./types.ts";

/**
 * All messages (kept after they finish, so tests and GET /v2/messages can see
 * final states) and the DLQ. Every mutation goes through `changed()`, which
 * wakes `waitFor` callers: tests wait on state, never on sleeps.
 *
 * Wake-ups are coalesced with setImmediate: all changes from one turn of the event
 * loop (e.g. many deliveries completing together) are evaluated once, which keeps
 * waiting cheap with thousands of messages. A state that lasts across network I/O
 * (ACTIVE during a delivery) is still observed: the check runs before the next poll.
 */
export class MessageStore {
  readonly messages = new Map<string, MessageRecord>();
  readonly dlq = new Map<string, DlqEntry>();
  private readonly listeners = new Set<() => void>();
  private dlqSeq = 0;
  private messageSeq = 0;
  private notifyQueued = false;
  /** Settled messages' ids, oldest settled first (a Set iterates in insertion order). */
  private readonly settled = new Set<string>();

  /**
   * `keepSettled`: how many settled messages (delivered, dead-lettered, cancelled) to
   * keep; the oldest beyond it are forgotten, as QStash forgets a delivered message.
   * Unlimited by default (tests read final states); a stack left running kept every
   * one: 28,493 messages 20 minutes after a start, and growing.
   */
  constructor(private readonly keepSettled = Infinity) {}

  add(message: MessageRecord): void {
    this.messages.set(message.messageId, message);
    this.changed(message);
  }

  get(messageId: string): MessageRecord | undefined {
    return this.messages.get(messageId);
  }

  /** dlqIds look like QStash's (`<epoch ms>-<seq>`, a Redis stream id), and sort in insertion order. */
  nextDlqId(now = Date.now()): string {
    return `${now}-${this.dlqSeq++}`;
  }

  nextMessageSeq(): number {
    return this.messageSeq++;
  }

  /** After a restart: new messages are created after every restored one. */
  restoreMessageSeq(next: number): void {
    this.messageSeq = Math.max(this.messageSeq, next);
  }

  /** Records a mutation (of `message`, when given) and schedules one wake-up of waiters. */
  changed(message?: MessageRecord): void {
    if (message) {
      message.version += 1;
      if (isSettled(message.state) && !this.settled.has(message.messageId)) this.forgetBeyond(message);
    }
    if (this.notifyQueued) return;
    this.notifyQueued = true;
    setImmediate(() => {
      this.notifyQueued = false;
      for (const listener of [...this.listeners]) listener();
    });
  }

  /**
   * Resolves with the predicate's first truthy value, re-checking after every change.
   * The timeout is a deadline (the promise rejects with `describe()` in the message), not a sleep.
   */
  waitFor<T>(
    predicate: () => T | undefined | false | null,
    timeoutMs: number,
    describe?: () => string,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const check = (): boolean => {
        let value: T | undefined | false | null;
        try {
          value = predicate();
        } catch (error) {
          cleanup();
          reject(error instanceof Error ? error : new Error(String(error)));
          return true;
        }
        if (value) {
          cleanup();
          resolve(value);
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(
          new Error(`qstash-dev waitFor timed out after ${timeoutMs} ms${describe ? `: ${describe()}` : ""}`),
        );
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.listeners.delete(listener);
      };
      const listener = () => void check();
      this.listeners.add(listener);
      check();
    });
  }

  private forgetBeyond(message: MessageRecord): void {
    this.settled.add(message.messageId);
    for (const id of this.settled) {
      if (this.settled.size <= this.keepSettled) break;
      this.settled.delete(id);
      this.messages.delete(id);
    }
  }

  clear(): void {
    this.settled.clear();
    this.messages.clear();
    this.dlq.clear();
    this.changed();
  }
}
