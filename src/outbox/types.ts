/** An event as the relay claimed it. */
export interface ClaimedEvent {
  seq: number;
  id: string;
  type: string;
  subject: string;
  scope: string | null;
  payload: unknown;
  /**
   * The payload as JSON text, when the claim read it so: the relay embeds it in
   * job bodies as is, and parses it only if a filter reads `payload`.
   */
  payloadJson?: string;
  /**
   * The whole event as it appears in job bodies (JobBody.event), as JSON text, when
   * the claim read it so: the relay embeds it as is.
   */
  eventJson?: string;
  createdAt: Date;
  attempts: number;
}

/** The columns of an events row the relay claims, as both drivers return them. */
export interface DbClaimedEvent {
  /** bigint: the drivers return int8 as a string. */
  seq: string;
  id: string;
  type: string;
  subject: string;
  scope: string | null;
  payload: unknown;
  created_at: Date;
  attempts: number;
}

/** Reads the columns every event row shares. */
export function eventFromRow(r: DbClaimedEvent): ClaimedEvent {
  return {
    seq: Number(r.seq),
    id: r.id,
    type: r.type,
    subject: r.subject,
    scope: r.scope,
    payload: r.payload,
    createdAt: r.created_at,
    attempts: r.attempts,
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
  /**
   * `body` serialised, exactly the bytes to send: the relay's planner builds it once
   * (it sized it against the message limit), so publishers send it rather than
   * stringify `body` again.
   */
  json?: string;
  retries?: number;
  /**
   * Headers QStash hands the job route with this job (`Upstash-Forward-<name>`), beyond
   * the body: a job failure's retry names the failure it retries. Most jobs have none.
   */
  forward?: Readonly<Record<string, string>>;
}

export interface PublishedJob {
  messageId: string;
  /** QStash had already accepted a job with this deduplication id. */
  deduplicated: boolean;
}
