/**
 * Message lifecycle states. The names follow QStash's message states
 * (CREATED, ACTIVE, RETRY, DELIVERED, ERROR, CANCELLED); ERROR means "in the DLQ".
 */
export type MessageState = "CREATED" | "ACTIVE" | "RETRY" | "DELIVERED" | "ERROR" | "CANCELLED";

/** Whether a message is done with: delivered, dead-lettered (ERROR) or cancelled. */
export function isSettled(state: MessageState): boolean {
  return state === "DELIVERED" || state === "ERROR" || state === "CANCELLED";
}

/** What produced a message: a publish, or QStash itself answering with a (failure) callback. */
export type MessageKind = "publish" | "callback" | "failure-callback";

export interface FlowControl {
  key: string;
  parallelism?: number;
  rate?: number;
  periodMs: number;
}

/** A flow-control key as `GET /v2/flowControl/<key>` answers it (the SDK's FlowControlInfo). */
export interface FlowControlInfo {
  flowControlKey: string;
  waitListSize: number;
  parallelismMax: number;
  parallelismCount: number;
  rateMax: number;
  rateCount: number;
  /** Seconds. */
  ratePeriod: number;
  /** Unix seconds. */
  ratePeriodStart: number;
  isPaused: boolean;
  isPinnedParallelism: boolean;
  isPinnedRate: boolean;
}

/** Delivery settings that Upstash-* (or Upstash-Callback-*, Upstash-Failure-Callback-*) headers carry. */
export interface DeliveryOptions {
  method: string;
  /** Relative delay as given (real milliseconds, before time scaling). */
  delayMs: number;
  retries: number;
  timeoutMs: number;
  /** Upstash-Retry-Delay expression (validated at publish), replacing the default backoff. */
  retryDelayExpression?: string;
  /** Headers sent to the destination: Content-Type plus Upstash-Forward-* with the prefix removed. */
  forwardHeaders: Record<string, string>;
}

export interface Attempt {
  /** The Upstash-Retried value sent with this attempt (0 on the first). */
  retried: number;
  startedAt: number;
  finishedAt?: number;
  /** Destination's status; undefined when no response arrived (timeout, refused, cancelled). */
  status?: number;
  error?: string;
  responseHeaders?: Record<string, string[]>;
  /** Base64 of the response body. */
  responseBody?: string;
  /** Unscaled delay chosen before the next attempt, when one was scheduled. */
  nextRetryDelayMs?: number;
  /** Which rule chose that delay. */
  nextRetryDelaySource?: "backoff" | "retry-delay" | "retry-after";
}

export interface MessageRecord {
  messageId: string;
  /** Creation order; breaks readyAt ties so equally-due messages go FIFO. */
  seq: number;
  /** Bumped on every mutation, so snapshots can be cached until the record changes. */
  version: number;
  kind: MessageKind;
  url: string;
  method: string;
  body: Buffer;
  /** Forwarded headers in QStash's `Record<string, string[]>` shape, canonical names. */
  header: Record<string, string[]>;
  maxRetries: number;
  timeoutMs: number;
  retryDelayExpression?: string;
  createdAt: number;
  /** Epoch ms before which delivery is not attempted (Upstash-Delay / Upstash-Not-Before). */
  notBefore: number;
  callback?: string;
  failureCallback?: string;
  callbackOptions?: DeliveryOptions;
  failureCallbackOptions?: DeliveryOptions;
  flowControl?: FlowControl;
  deduplicationId?: string;
  /** Upstash-Label's labels, in the order given; QStash filters the DLQ (and logs) by them. */
  labels?: string[];
  /** For callbacks: the message whose result they report. */
  sourceMessageId?: string;
  callerIP: string;
  state: MessageState;
  /** How many times delivery has been retried; the next attempt carries this as Upstash-Retried. */
  retried: number;
  /** Epoch ms when the next attempt may start (scaled). */
  readyAt: number;
  attempts: Attempt[];
  dlqId?: string;
}

export interface DlqEntry {
  dlqId: string;
  message: MessageRecord;
  createdAt: number;
  responseStatus?: number;
  responseHeader?: Record<string, string[]>;
  /** Base64 response body of the last attempt. */
  responseBody?: string;
}
