import type { FannedEvent } from "./relay/pass.ts";
import type { Fanout } from "./schema.ts";
import { query, type Queryable } from "./sql.ts";
import { STATE_SQL, idsSql } from "./state.ts";

export interface ReceiptEntry {
  id: string;
  type: string;
  fannedOutAt: Date | null;
  /** subscription → its job (message id), or the event it was coalesced into. */
  fanout: Fanout | null;
  poisoned: boolean;
}

export interface Receipt {
  /** Every event is fanned out (or poisoned: it will not be, until an operator acts). */
  complete: boolean;
  events: ReceiptEntry[];
}

interface DbReceipt {
  id: string;
  type: string;
  fanned_out_at: Date | null;
  fanout: Fanout | null;
  poisoned: boolean;
}

export async function readReceipt(db: Queryable, eventIds: string[]): Promise<Receipt> {
  if (eventIds.length === 0) return { complete: true, events: [] };
  const { rows } = await query<DbReceipt>(
    db,
    `SELECT id, type, fanned_out_at, fanout, ${STATE_SQL.poisoned} AS poisoned
       FROM events WHERE ${idsSql("$1")}`,
    [eventIds],
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  const events = eventIds.map((id): ReceiptEntry => {
    const r = byId.get(id);
    return {
      id,
      type: r?.type ?? "unknown",
      fannedOutAt: r?.fanned_out_at ?? null,
      fanout: r?.fanout ?? null,
      poisoned: r?.poisoned ?? false,
    };
  });
  return { complete: events.every((e) => e.fannedOutAt !== null || e.poisoned), events };
}

export interface AwaitOptions {
  /** Give up at this time; the caller answers 202 with a link to poll. */
  deadline: number;
  pollMs?: number;
  /**
   * The caller's own kick. When it settles, the answer is the receipt it resolved
   * to if that is a complete receipt of these events (receiptFromKick: its passes
   * fanned every one out), without reading the rows; otherwise the rows are read
   * at once rather than after a poll interval.
   */
  kicked?: Promise<unknown>;
}

/**
 * A receipt is polled every pollMs for its first POLL_FAST_FOR_MS, within which a
 * write whose kick left an event to another pass is answered under load (p99 ~300 ms
 * at concurrency 20 in bench:write), as soon as before; after that the waits double
 * up to POLL_MAX_MS.
 */
const POLL_FAST_FOR_MS = 500;
const POLL_MAX_MS = 400;

/**
 * The async-response contract: wait until the events are fanned out or the
 * deadline passes. Polls the rows themselves (LISTEN is not available to a
 * request-scoped Worker connection), so a fan-out done by any pass counts,
 * not only the caller's own kick. Each poll reads only the events not fanned out
 * yet (a fanned event's entry does not change), and past POLL_FAST_FOR_MS the wait
 * between polls doubles up to POLL_MAX_MS: every event re-read every 50 ms for the
 * whole wait was ~200 reads of a 2,000-event import per request while the relay was
 * behind (a security review's note on what one key can make the database do).
 */
export async function awaitFanout(
  db: Queryable,
  eventIds: string[],
  options: AwaitOptions,
): Promise<Receipt> {
  const fastMs = options.pollMs ?? 50;
  let pollMs = fastMs;
  const slowFrom = Date.now() + POLL_FAST_FOR_MS;
  if (options.kicked) {
    const kicked = await Promise.race([
      options.kicked.catch(() => undefined),
      sleep(Math.max(0, options.deadline - Date.now())),
    ]);
    if (isCompleteReceiptOf(kicked, eventIds)) return kicked;
  }
  const fanned = new Map<string, ReceiptEntry>();
  for (;;) {
    const read = await readReceipt(
      db,
      eventIds.filter((id) => !fanned.has(id)),
    );
    for (const e of read.events) if (e.fannedOutAt !== null) fanned.set(e.id, e);
    const justRead = new Map(read.events.map((e) => [e.id, e]));
    const receipt: Receipt = {
      complete: read.complete,
      events: eventIds.map((id) => fanned.get(id) ?? justRead.get(id)!),
    };
    const left = options.deadline - Date.now();
    if (receipt.complete || left <= 0) return receipt;
    await sleep(Math.min(pollMs, left));
    if (Date.now() >= slowFrom) pollMs = Math.min(pollMs * 2, Math.max(POLL_MAX_MS, fastMs));
  }
}

/**
 * The receipt a write's kick can answer from what its own passes marked, when
 * they fanned out every one of the write's events: the same entries readReceipt
 * would read back (fanned_out_at is the pass transaction's now(), the fanout the
 * jsonb it wrote, with its keys in jsonb's order), one round trip fewer. Undefined
 * when any event was left to another pass (a concurrent one had it locked), failed
 * or was not claimed: then the rows are read, as for any poll.
 */
export function receiptFromKick(eventIds: string[], fanned: readonly FannedEvent[]): Receipt | undefined {
  if (eventIds.length === 0) return undefined;
  const byId = new Map(fanned.map((e) => [e.id, e]));
  const events: ReceiptEntry[] = [];
  for (const id of eventIds) {
    const e = byId.get(id);
    if (!e) return undefined;
    events.push({
      id,
      type: e.type,
      fannedOutAt: e.fannedAt,
      fanout: inJsonbOrder(e.fanout),
      poisoned: false,
    });
  }
  return { complete: true, events };
}

function isCompleteReceiptOf(value: unknown, eventIds: string[]): value is Receipt {
  if (typeof value !== "object" || value === null) return false;
  const receipt = value as Partial<Receipt>;
  return (
    receipt.complete === true &&
    Array.isArray(receipt.events) &&
    receipt.events.length === eventIds.length &&
    receipt.events.every((e, i) => e.id === eventIds[i])
  );
}

const utf8 = new TextEncoder();

/**
 * A copy with every object's keys in the order Postgres keeps a jsonb object's
 * (shorter keys first, then by their bytes), so an object built here serialises
 * to the same JSON as the same value read back from a jsonb column.
 */
export function inJsonbOrder<T>(value: T): T {
  if (Array.isArray(value)) return value.map(inJsonbOrder) as T;
  if (typeof value !== "object" || value === null) return value;
  const keys = Object.keys(value).map((key) => ({ key, bytes: utf8.encode(key) }));
  keys.sort((a, b) => a.bytes.length - b.bytes.length || compareBytes(a.bytes, b.bytes));
  const record = value as Record<string, unknown>;
  return Object.fromEntries(keys.map(({ key }) => [key, inJsonbOrder(record[key])])) as T;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length && i < b.length; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
