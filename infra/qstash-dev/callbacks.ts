import type { DeliveryResult } from "./delivery.ts";
import type { Attempt, MessageRecord } from "./types.ts";

/**
 * The callback / failure-callback body, field for field as the callbacks docs list
 * it. Two readings of those docs are ours: the docs misspell `sourceMessasgeId`
 * (we send `sourceMessageId`, which is what the issue and the DLQ API use), and they
 * show `notBefore`/`createdAt` as strings of epoch ms, which we follow. `sourceHeader`
 * uses the message header shape (`Record<string, string[]>`), as GET /v2/messages does.
 */
export function buildCallbackBody(
  source: MessageRecord,
  attempt: Attempt,
  result: DeliveryResult,
  dlqId: string | undefined,
): Record<string, unknown> {
  return {
    status: result.status ?? 0,
    header: result.headers,
    body: result.body.toString("base64"),
    retried: attempt.retried,
    maxRetries: source.maxRetries,
    ...(dlqId !== undefined ? { dlqId } : {}),
    sourceMessageId: source.messageId,
    url: source.url,
    method: source.method,
    sourceHeader: source.header,
    sourceBody: source.body.toString("base64"),
    notBefore: String(source.notBefore),
    createdAt: String(source.createdAt),
    callerIP: source.callerIP,
  };
}
