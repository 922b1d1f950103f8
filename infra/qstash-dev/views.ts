import type { Attempt, DlqEntry, MessageRecord } from "./types.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * QStash reports a body as `body` when it is valid UTF-8 and as `bodyBase64`
 * otherwise (GET /v2/dlq/{dlqId} docs); the same rule applies to responseBody.
 */
function bodyFields(data: Buffer, name: string): Record<string, string> {
  if (data.length === 0) return {};
  try {
    return { [name]: utf8.decode(data) };
  } catch {
    return { [`${name}Base64`]: data.toString("base64") };
  }
}

/** The GET /v2/messages/{id} shape, plus `state` (and our attempt count `retried`). */
export function messageView(message: MessageRecord): Record<string, unknown> {
  const control = message.flowControl;
  return {
    messageId: message.messageId,
    url: message.url,
    method: message.method,
    header: message.header,
    ...bodyFields(message.body, "body"),
    maxRetries: message.maxRetries,
    ...(message.retryDelayExpression !== undefined
      ? { retryDelayExpression: message.retryDelayExpression }
      : {}),
    notBefore: message.notBefore,
    createdAt: message.createdAt,
    ...(message.callback !== undefined ? { callback: message.callback } : {}),
    ...(message.failureCallback !== undefined ? { failureCallback: message.failureCallback } : {}),
    callerIP: message.callerIP,
    // As the SDK's types read them: `labels` all of them, `label` (deprecated) the first.
    ...(message.labels?.length ? { label: message.labels[0], labels: message.labels } : {}),
    ...(control
      ? {
          flowControlKey: control.key,
          ...(control.parallelism !== undefined ? { parallelism: control.parallelism } : {}),
          ...(control.rate !== undefined ? { rate: control.rate, period: control.periodMs / 1000 } : {}),
        }
      : {}),
    state: message.state,
    retried: message.retried,
  };
}

/** The DLQ message shape: the message plus dlqId and the last response (GET /v2/dlq/{dlqId} docs). */
export function dlqView(entry: DlqEntry): Record<string, unknown> {
  const { state: _state, retried: _retried, ...message } = messageView(entry.message);
  return {
    ...message,
    dlqId: entry.dlqId,
    ...(entry.responseStatus !== undefined ? { responseStatus: entry.responseStatus } : {}),
    responseHeader: entry.responseHeader ?? {},
    ...bodyFields(Buffer.from(entry.responseBody ?? "", "base64"), "responseBody"),
  };
}

/** The richer, test-facing snapshot: everything, including every attempt. */
export interface MessageSnapshot {
  messageId: string;
  kind: MessageRecord["kind"];
  url: string;
  method: string;
  state: MessageRecord["state"];
  body: string;
  header: Record<string, string[]>;
  retried: number;
  maxRetries: number;
  attempts: MessageRecord["attempts"];
  dlqId?: string;
  sourceMessageId?: string;
  flowControlKey?: string;
  createdAt: number;
}

const snapshotCache = new WeakMap<MessageRecord, { version: number; snapshot: MessageSnapshot }>();

/**
 * A frozen copy of the record, rebuilt only when the record's version changed:
 * waitFor evaluates predicates over every message on each change, so this must be cheap.
 */
export function snapshot(message: MessageRecord): MessageSnapshot {
  const cached = snapshotCache.get(message);
  if (cached && cached.version === message.version) return cached.snapshot;
  const built: MessageSnapshot = Object.freeze({
    messageId: message.messageId,
    kind: message.kind,
    url: message.url,
    method: message.method,
    state: message.state,
    body: message.body.toString("utf8"),
    header: Object.freeze(structuredClone(message.header)),
    retried: message.retried,
    maxRetries: message.maxRetries,
    attempts: Object.freeze(message.attempts.map((a) => Object.freeze(structuredClone(a)))) as Attempt[],
    ...(message.dlqId !== undefined ? { dlqId: message.dlqId } : {}),
    ...(message.sourceMessageId !== undefined ? { sourceMessageId: message.sourceMessageId } : {}),
    ...(message.flowControl ? { flowControlKey: message.flowControl.key } : {}),
    createdAt: message.createdAt,
  });
  snapshotCache.set(message, { version: message.version, snapshot: built });
  return built;
}
