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
