import { z } from "zod";
import { InvalidInputError, isTypeGlob, TYPE_GLOB_RULE } from "../../outbox/index.ts";
import type { webhookAttempts, webhookDeliveries, webhookEndpoints } from "../schema.ts";
import { webhookDeliveryStatuses } from "../schema.ts";
import { multiLine, scopeFilter, scopeValue, wholeNumber } from "../text.ts";
import { checkWebhookUrl, type UrlPolicy } from "./url-safety.ts";

export type EndpointRow = typeof webhookEndpoints.$inferSelect;
export type DeliveryRow = typeof webhookDeliveries.$inferSelect;
export type AttemptRow = typeof webhookAttempts.$inferSelect;

/** An endpoint URL, checked against the deployment's policy and stored as the parser normalised it. */
export function webhookUrl(policy: UrlPolicy) {
  return z
    .string({ error: (issue) => (issue.input === undefined ? "is required" : "must be a URL string") })
    .trim()
    .transform((input, ctx) => {
      const verdict = checkWebhookUrl(input, policy);
      if (verdict.ok) return verdict.url;
      ctx.addIssue({ code: "custom", message: verdict.reason });
      return z.NEVER;
    });
}

// The same glob rule as subscriptions (isTypeGlob) and the same matcher at
// fan-out (matchesGlob), so an endpoint's types mean what a subscription's do.
// The rule names the glob it refuses: a form's error said only "types.1" of a list
// typed on one line (the re-check walkthrough).
const typeGlobs = z
  .array(
    z
      .string()
      .trim()
      .max(200, "must be at most 200 characters")
      .refine(isTypeGlob, { error: (issue) => `${JSON.stringify(issue.input)} ${TYPE_GLOB_RULE}` }),
  )
  .min(1, "must list at least one event-type glob (`*` for every event)")
  .max(100, "must list at most 100 globs")
  .transform((globs) => [...new Set(globs)]);

const description = multiLine(500).trim();

/**
 * What a saved endpoint's types say when some of them can match no event: globs with
 * upper case were taken before 2026-12-07 and match nothing (event types are lower
 * case), so such an endpoint read "healthy" while it was sent nothing. Undefined
 * when every glob is one today's rule takes.
 */
export function unmatchedTypesText(types: readonly string[]): string | undefined {
  const dead = types.filter((t) => !isTypeGlob(t));
  if (dead.length === 0) return undefined;
  const list = dead.map((t) => JSON.stringify(t)).join(", ");
  return `${list} ${dead.length === 1 ? "matches" : "match"} no event (event types are lower case): save the types in lower case`;
}

export function createEndpointInput(policy: UrlPolicy) {
  return z.strictObject({
    url: webhookUrl(policy),
    types: typeGlobs.default(["*"]),
    // The scope is fixed at creation: an endpoint moved to another scope would
    // start receiving another tenant's events, so PATCH does not take it.
    scope: scopeValue,
    description: description.default(""),
    // false: registered but sent nothing until enabled, e.g. while the receiver is
    // still being built (recorded as an operator's disable, so PATCH enables it).
    enabled: z.boolean({ error: "must be true or false" }).default(true),
  });
}
export type CreateEndpointInput = z.input<ReturnType<typeof createEndpointInput>>;

export function updateEndpointInput(policy: UrlPolicy) {
  return z
    .strictObject({
      url: webhookUrl(policy).optional(),
      types: typeGlobs.optional(),
      description: description.optional(),
      enabled: z.boolean({ error: "must be true or false" }).optional(),
      // Said as what it is rather than "not a known field": a scope is fixed.
      scope: z
        .unknown()
        .refine(
          () => false,
          "is fixed at creation (moved, an endpoint would get another scope's events): create another endpoint",
        )
        .optional(),
    })
    .refine((patch) => Object.values(patch).some((v) => v !== undefined), {
      message: "must change at least one of url, types, description, enabled",
      // Only for an otherwise valid body: `{"scope": …}` should hear that scope is fixed, alone.
      when: (payload) => payload.issues.length === 0,
    });
}
export type UpdateEndpointInput = z.input<ReturnType<typeof updateEndpointInput>>;

/** The most rows one page of endpoints or deliveries holds. */
export const PAGE_LIMIT_MAX = 200;

/** Keyset pages: newest first, by (created_at, id), so a page never shifts as rows arrive. */
export const pageQuery = {
  // Digits only, as every other listing's `limit`: z.coerce would read `0x10`, `1e1` and ` 5`.
  limit: wholeNumber(1, PAGE_LIMIT_MAX).default(50),
  cursor: z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const cursor = decodeCursor(text);
      if (!cursor) {
        ctx.addIssue({ code: "custom", message: "is not a cursor this API returned" });
        return z.NEVER;
      }
      return cursor;
    }),
};

export const listEndpointsQuery = z.strictObject({
  scope: scopeFilter,
  // The endpoints at this URL, as stored (the URL parser's form, so `HTTPS://Host`
  // finds `https://host/`): what a script whose create timed out looks for before it
  // creates again, rather than a second endpoint that gets every event twice.
  url: z
    .string()
    .trim()
    .min(1, "must be a URL, e.g. https://example.com/hooks")
    .max(2048, "must be at most 2048 characters")
    .transform((text) => (URL.canParse(text) ? new URL(text).href : text))
    .optional(),
  ...pageQuery,
});

export const listDeliveriesQuery = z.strictObject({
  status: z.enum(webhookDeliveryStatuses, { error: "must be pending, delivered or failed" }).optional(),
  ...pageQuery,
});

export interface Cursor {
  /** created_at to the microsecond, as Postgres wrote it: a JS Date would round it and skip rows. */
  at: string;
  id: string;
  /**
   * Which list, with which filters, the cursor was made for (`listTag`): given to
   * another, it answered an empty page, read as the end of the list. Undefined in
   * a cursor from before it was added, which is taken as it was.
   */
  list?: string;
}

export function encodeCursor(cursor: Cursor): string {
  const text = `${cursor.list === undefined ? "" : `${cursor.list}|`}${cursor.at}|${cursor.id}`;
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function decodeCursor(text: string): Cursor | undefined {
  try {
    const parts = atob(text.replace(/-/g, "+").replace(/_/g, "/")).split("|");
    if (parts.length !== 2 && parts.length !== 3) return undefined;
    const [list, at, id] = parts.length === 3 ? parts : [undefined, ...parts];
    if (!at || !id || (list !== undefined && !/^[0-9a-f]{8}$/.test(list))) return undefined;
    if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(at)) return undefined;
    if (!z.guid().safeParse(id).success) return undefined;
    return list === undefined ? { at, id } : { at, id, list };
  } catch {
    return undefined;
  }
}

/**
 * A short tag for a list and its filters (32-bit FNV-1a, hex): what a cursor carries
 * to be refused by any other list. Not a secret and not a guarantee: two lists
 * sharing a tag only get back the old behaviour, an empty page.
 */
export function listTag(...parts: (string | null | undefined)[]): string {
  const text = JSON.stringify(parts.map((p) => (p === undefined ? { any: true } : p)));
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, "0");
}

/** Refuses a cursor made for another list, or for this one with other filters. */
export function assertCursorOf(cursor: Cursor | undefined, list: string): void {
  if (cursor?.list !== undefined && cursor.list !== list)
    throw new InvalidInputError(
      "cursor: belongs to another list, or to this one with other filters: ask again without it, from the first page",
      "cursor",
    );
}

/**
 * What the API shows of an endpoint. Built field by field from the row, never by
 * spreading it: the row holds the sealed secrets, and a new column must be
 * chosen to be shown, not leak by default.
 */
export function endpointView(row: EndpointRow, now: Date = new Date()) {
  const rotating =
    row.previousSecretBox !== null &&
    row.previousSecretExpiresAt !== null &&
    row.previousSecretExpiresAt.getTime() > now.getTime();
  return {
    id: row.id,
    url: row.url,
    types: row.types,
    scope: row.scope,
    description: row.description,
    enabled: row.enabled,
    disabledReason: row.disabledReason,
    disabledAt: row.disabledAt,
    lastSuccessAt: row.lastSuccessAt,
    failingSince: row.failingSince,
    /** Until when the previous secret still signs beside the current one; null outside a rotation. */
    previousSecretExpiresAt: rotating ? row.previousSecretExpiresAt : null,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}
export type EndpointView = ReturnType<typeof endpointView>;

export function deliveryView(row: DeliveryRow) {
  return {
    id: row.id,
    endpointId: row.endpointId,
    eventId: row.eventId,
    eventType: row.eventType,
    scope: row.scope,
    status: row.status,
    attempts: row.attempts,
    lastAttemptAt: row.lastAttemptAt,
    nextAttemptAt: row.nextAttemptAt,
    deliveredAt: row.deliveredAt,
    failedAt: row.failedAt,
    lastError: row.lastError,
    createdAt: row.createdAt,
  };
}

export function attemptView(row: AttemptRow) {
  return {
    id: row.id,
    attemptedAt: row.attemptedAt,
    url: row.url,
    durationMs: row.durationMs,
    status: row.status,
    error: row.error,
    responseHeaders: row.responseHeaders,
    responseBody: row.responseBody,
  };
}
