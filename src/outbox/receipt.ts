import type { Fanout } from "./schema.ts";
import { query, type Queryable } from "./sql.ts";
import { STATE_SQL } from "./state.ts";

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
       FROM events WHERE id = ANY($1::uuid[])`,
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
  /** Resolves when the caller's own kick finished, to re-read at once instead of after a poll interval. */
  kicked?: Promise<unknown>;
}

/**
 * The async-response contract: wait until the events are fanned out or the
 * deadline passes. Polls the rows themselves (LISTEN is not available to a
 * request-scoped Worker connection), so a fan-out done by any pass counts,
 * not only the caller's own kick.
 */
export async function awaitFanout(
  db: Queryable,
  eventIds: string[],
  options: AwaitOptions,
): Promise<Receipt> {
  const pollMs = options.pollMs ?? 50;
  if (options.kicked) {
    await Promise.race([
      options.kicked.catch(() => undefined),
      sleep(Math.max(0, options.deadline - Date.now())),
    ]);
  }
  for (;;) {
    const receipt = await readReceipt(db, eventIds);
    const left = options.deadline - Date.now();
    if (receipt.complete || left <= 0) return receipt;
    await sleep(Math.min(pollMs, left));
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
