import { createHash } from "node:crypto";
import type { PublishRequest } from "./publish-request.ts";

/**
 * Remembers deduplication keys for a window (10 minutes by default, as the issue
 * specifies for QStash). Expired entries are swept lazily on use, so the store
 * owns no timers and never keeps the process alive.
 */
export class DedupStore {
  private readonly seen = new Map<string, { messageId: string; expiresAt: number }>();

  constructor(private readonly windowMs: number) {}

  /** The keys a publish is deduplicated on: its Deduplication-Id and/or its content hash. */
  static keysFor(request: PublishRequest): string[] {
    const keys: string[] = [];
    if (request.deduplicationId !== undefined) keys.push(`id:${request.deduplicationId}`);
    if (request.contentBasedDeduplication) keys.push(`content:${contentHash(request)}`);
    return keys;
  }

  /** The messageId of an earlier message with any of these keys, if still within the window. */
  find(keys: string[], now = Date.now()): string | undefined {
    this.sweep(now);
    for (const key of keys) {
      const hit = this.seen.get(key);
      if (hit) return hit.messageId;
    }
    return undefined;
  }

  /** Returns when the keys expire. */
  remember(keys: string[], messageId: string, now = Date.now()): number {
    const expiresAt = now + this.windowMs;
    for (const key of keys) this.seen.set(key, { messageId, expiresAt });
    return expiresAt;
  }

  /** A key kept from before a restart; given in expiry order (the order `sweep` relies on). */
  restore(key: string, messageId: string, expiresAt: number): void {
    this.seen.set(key, { messageId, expiresAt });
  }

  /** Every key still in its window, in expiry order. */
  entries(now = Date.now()): { key: string; messageId: string; until: number }[] {
    this.sweep(now);
    return [...this.seen].map(([key, { messageId, expiresAt }]) => ({ key, messageId, until: expiresAt }));
  }

  clear(): void {
    this.seen.clear();
  }

  /**
   * Every key lives for the same window and is only remembered while absent, so the
   * Map's insertion order is expiry order: stop at the first live key. (A full scan
   * here made every publish O(keys held) and a 100,000-event drain quadratic.)
   */
  private sweep(now: number): void {
    for (const [key, entry] of this.seen) {
      if (entry.expiresAt > now) return;
      this.seen.delete(key);
    }
  }
}

/**
 * Content-based deduplication hashes what the deduplication docs list:
 * the destination, the body, and the headers (Content-Type plus forwarded ones).
 */
function contentHash(request: PublishRequest): string {
  const hash = createHash("sha256");
  hash.update(request.destination).update("\0");
  const headers = Object.entries(request.options.forwardHeaders).sort(([a], [b]) => a.localeCompare(b));
  hash.update(JSON.stringify(headers)).update("\0");
  hash.update(request.body);
  return hash.digest("hex");
}
