import type { DlqEntry, MessageRecord } from "./types.ts";

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
    notBefore: message.notBefore,
    createdAt: message.createdAt,
    ...(message.callback !== undefined ? { callback: message.callback } : {}),
    ...(message.failureCallback !== undefined ? { failureCallback: message.failureCallback } : {}),
    callerIP: message.callerIP,
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

export function snapshot(message: MessageRecord): MessageSnapshot {
  return {
    messageId: message.messageId,
    kind: message.kind,
    url: message.url,
    method: message.method,
    state: message.state,
    body: message.body.toString("utf8"),
    header: structuredClone(message.header),
    retried: message.retried,
    maxRetries: message.maxRetries,
    attempts: structuredClone(message.attempts),
    ...(message.dlqId !== undefined ? { dlqId: message.dlqId } : {}),
    ...(message.sourceMessageId !== undefined ? { sourceMessageId: message.sourceMessageId } : {}),
    ...(message.flowControl ? { flowControlKey: message.flowControl.key } : {}),
    createdAt: message.createdAt,
  };
}
