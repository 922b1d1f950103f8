/** An event as the relay claimed it. */
export interface ClaimedEvent {
  seq: number;
  id: string;
  type: string;
  subject: string;
  scope: string | null;
  payload: unknown;
  createdAt: Date;
  attempts: number;
}

/** Reads the columns every event row shares, as both drivers return them. */
export function eventFromRow(r: Record<string, unknown>): ClaimedEvent {
  return {
    seq: Number(r.seq),
    id: r.id as string,
    type: r.type as string,
    subject: r.subject as string,
    scope: (r.scope as string | null) ?? null,
    payload: r.payload,
    createdAt: r.created_at as Date,
    attempts: Number(r.attempts),
  };
}

/** What a subscriber receives: the event, and any earlier events a coalesced job covers. */
export interface JobBody {
  subscription: string;
  event: {
    id: string;
    seq: number;
    type: string;
    subject: string;
    scope: string | null;
    payload: unknown;
    createdAt: string;
  };
  /** Ids of earlier events of the same subject folded into this job (coalescing subscriptions only). */
  coalesced: string[];
}

export interface Job {
  subscription: string;
  /** `<event id>:<subscription>`: a replayed publish is dropped by QStash within its window. */
  deduplicationId: string;
  body: JobBody;
  retries?: number;
}

export interface PublishedJob {
  messageId: string;
  /** QStash had already accepted a job with this deduplication id. */
  deduplicated: boolean;
}
