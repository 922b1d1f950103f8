/** The event fields a webhook carries. */
export interface WebhookEvent {
  id: string;
  type: string;
  subject: string;
  scope: string | null;
  payload: unknown;
  /** When the event was recorded (ISO 8601). */
  createdAt: string;
}

/**
 * The exact JSON an endpoint receives: `{"type", "timestamp", "data"}`. It is
 * serialised once, stored on the delivery row and POSTed byte for byte on every
 * attempt, since the signature covers these bytes and a receiver deduplicating
 * by `webhook-id` must see the same message each time.
 */
export function webhookBody(event: WebhookEvent): string {
  return JSON.stringify({
    type: event.type,
    timestamp: event.createdAt,
    data: { id: event.id, subject: event.subject, scope: event.scope, payload: event.payload },
  });
}
