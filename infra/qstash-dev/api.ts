import type { IncomingMessage, ServerResponse } from "node:http";
import type { Broker, PublishResult } from "./broker.ts";
import { HttpError, readBody, sendEmpty, sendJson } from "./http-util.ts";
import {
  headerMapFromJson,
  headerMapFromNode,
  parsePublish,
  parseRetryOverrides,
  type PublishDefaults,
  type PublishRequest,
} from "./publish-request.ts";
import type { DlqEntry } from "./types.ts";
import { dlqView, messageView } from "./views.ts";

export interface ApiContext {
  broker: Broker;
  defaults: PublishDefaults;
  /** Whole-request cap for /v2/batch, which carries many message bodies. */
  maxBatchBytes: number;
  /** Fault injection, consulted before a publish or batch is accepted. */
  beforePublish: (res: ServerResponse) => Promise<boolean>;
}

/** DLQ and bulk listings page at most 100 (list-dlq-messages docs: "Default and maximum is 100"). */
const PAGE_SIZE = 100;

/** Routes /v2/*. Returns false when no route matched, so the caller answers 404. */
export async function handleApi(
  ctx: ApiContext,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  rawPath: string,
): Promise<boolean> {
  const method = req.method ?? "GET";
  const path = url.pathname;

  if (rawPath.startsWith("/v2/publish/")) {
    allow(method, ["POST"]);
    await publish(ctx, req, res, url, rawPath.slice("/v2/publish/".length));
    return true;
  }
  if (path === "/v2/batch") {
    allow(method, ["POST"]);
    await batch(ctx, req, res);
    return true;
  }

  // Flow control's read side (get-flow-control-key / list-flow-control-keys docs):
  // an operator's view of how many messages wait behind a key's limits.
  if (path === "/v2/flowControl" || path === "/v2/flowControl/") {
    allow(method, ["GET"]);
    const search = url.searchParams.get("search");
    const controls = ctx.broker.flowControls();
    sendJson(res, 200, search ? controls.filter((c) => c.flowControlKey.includes(search)) : controls);
    return true;
  }
  const flowMatch = /^\/v2\/flowControl\/([^/]+)$/.exec(path);
  if (flowMatch) {
    allow(method, ["GET"]);
    const key = decodePathParam(flowMatch[1]!);
    const info = ctx.broker.flowControl(key);
    if (!info) throw new HttpError(404, `flow control key ${key} not found`);
    sendJson(res, 200, info);
    return true;
  }

  const messageMatch = /^\/v2\/messages\/([^/]+)$/.exec(path);
  if (messageMatch) {
    allow(method, ["GET", "DELETE"]);
    const id = decodePathParam(messageMatch[1]!);
    const message = ctx.broker.store.get(id);
    if (!message) throw new HttpError(404, `message ${id} not found`);
    if (method === "GET") sendJson(res, 200, messageView(message));
    else if (ctx.broker.cancel(id))
      sendJson(res, 202, { cancelled: 1 }); // 202 per the OpenAPI spec
    else throw new HttpError(404, `message ${id} is not pending`);
    return true;
  }

  if (path === "/v2/dlq") {
    allow(method, ["GET", "DELETE"]);
    const entries = filterDlq(ctx, url);
    if (method === "GET") {
      const offset = Number(url.searchParams.get("cursor") ?? "0") || 0;
      const count = Math.min(PAGE_SIZE, Number(url.searchParams.get("count") ?? PAGE_SIZE) || PAGE_SIZE);
      const page = entries.slice(offset, offset + count);
      const next = offset + count < entries.length ? String(offset + count) : undefined;
      sendJson(res, 200, { messages: page.map(dlqView), ...(next ? { cursor: next } : {}) });
    } else {
      // No filter means every entry: the SDK sends `{ all: true }` as just count/cursor.
      for (const entry of entries) ctx.broker.deleteFromDlq(entry.dlqId);
      sendJson(res, 200, { deleted: entries.length });
    }
    return true;
  }
  if (path === "/v2/dlq/retry") {
    allow(method, ["POST"]);
    const overrides = parseRetryOverrides(headerMapFromNode(req.headers), ctx.defaults);
    await drain(req);
    const responses = filterDlq(ctx, url).map((entry) => ctx.broker.retryFromDlq(entry.dlqId, overrides));
    sendJson(res, 200, { responses: responses.filter((r) => r !== undefined).map(publishAnswer) });
    return true;
  }
  const retryMatch = /^\/v2\/dlq\/retry\/([^/]+)$/.exec(path);
  if (retryMatch) {
    allow(method, ["POST"]);
    const dlqId = decodePathParam(retryMatch[1]!);
    const overrides = parseRetryOverrides(headerMapFromNode(req.headers), ctx.defaults);
    await drain(req);
    const result = ctx.broker.retryFromDlq(dlqId, overrides);
    if (!result) throw new HttpError(404, `dlq message ${dlqId} not found`);
    sendJson(res, 200, publishAnswer(result));
    return true;
  }
  const dlqMatch = /^\/v2\/dlq\/([^/]+)$/.exec(path);
  if (dlqMatch) {
    allow(method, ["GET", "DELETE"]);
    const dlqId = decodePathParam(dlqMatch[1]!);
    const entry = ctx.broker.store.dlq.get(dlqId);
    // "If the message is not found in the DLQ ... the endpoint returns a 404" (GET dlq docs).
    if (!entry) throw new HttpError(404, `dlq message ${dlqId} not found`);
    if (method === "GET") sendJson(res, 200, dlqView(entry));
    else {
      ctx.broker.deleteFromDlq(dlqId);
      // The SDK reads no body here (parseResponseAsJson: false); an empty 200 is our choice.
      sendEmpty(res, 200);
    }
    return true;
  }
  return false;
}

/** A malformed escape (`/v2/dlq/%`) is the client's mistake: 400, not a 500. */
function decodePathParam(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new HttpError(400, `malformed path parameter: ${JSON.stringify(value)}`);
  }
}

function allow(method: string, allowed: string[]): void {
  if (!allowed.includes(method)) {
    throw new HttpError(405, `method ${method} not allowed`, { allow: allowed.join(", ") });
  }
}

async function drain(req: IncomingMessage): Promise<void> {
  await readBody(req, 1024 * 1024).catch(() => undefined);
}

function filterDlq(ctx: ApiContext, url: URL): DlqEntry[] {
  const q = url.searchParams;
  const ids = q.getAll("dlqIds").flatMap((v) => v.split(","));
  let entries = [...ctx.broker.store.dlq.values()];
  if (ids.length > 0) return entries.filter((e) => ids.includes(e.dlqId));
  const messageId = q.get("messageId");
  // The SDK sends a filter of several values as the parameter repeated; an entry
  // matching any of them passes (its DLQ filter docs: OR within a field, AND across).
  const targets = q.getAll("url");
  const labels = q.getAll("label");
  const statuses = q.getAll("responseStatus");
  if (messageId) entries = entries.filter((e) => e.message.messageId === messageId);
  if (targets.length > 0) entries = entries.filter((e) => targets.includes(e.message.url));
  if (labels.length > 0) entries = entries.filter((e) => e.message.labels?.some((l) => labels.includes(l)));
  if (statuses.length > 0) entries = entries.filter((e) => statuses.includes(String(e.responseStatus)));
  if (q.get("order") === "latestFirst") entries.reverse();
  return entries;
}

const publishAnswer = (r: PublishResult) => ({
  messageId: r.messageId,
  url: r.url,
  ...(r.deduplicated ? { deduplicated: true } : {}),
});

function callerIP(req: IncomingMessage): string {
  return req.socket.remoteAddress?.replace(/^::ffff:/, "") ?? "";
}

/**
 * The destination is everything after /v2/publish/, taken from the raw request
 * target so `http://host/path` survives untouched, plus the query string (QStash
 * forwards query parameters to the destination) minus our own `qstash_token`.
 * A percent-encoded destination (`https%3A%2F%2F...`) is decoded.
 */
function destinationFrom(rawRest: string, url: URL): string {
  const queryStart = rawRest.indexOf("?");
  let destination = queryStart === -1 ? rawRest : rawRest.slice(0, queryStart);
  if (!/^[a-z][\w+.-]*:\/\//i.test(destination)) {
    try {
      destination = decodeURIComponent(destination);
    } catch {
      // keep as is; validation will reject it
    }
  }
  const query = new URLSearchParams(url.search);
  query.delete("qstash_token");
  const rest = query.toString();
  return rest ? `${destination}?${rest}` : destination;
}

async function publish(ctx: ApiContext, req: IncomingMessage, res: ServerResponse, url: URL, rest: string) {
  const body = await readBody(req, ctx.defaults.maxBodyBytes);
  const request = parsePublish(
    destinationFrom(rest, url),
    headerMapFromNode(req.headers),
    body,
    ctx.defaults,
  );
  if (!(await ctx.beforePublish(res))) return;
  const result = ctx.broker.publish(request, callerIP(req));
  // 200 per the OpenAPI spec; the deduplication docs: a duplicate is accepted and answered with
  // the existing messageId, "the only difference will be the response status code" (202).
  sendJson(res, result.deduplicated ? 202 : 200, publishAnswer(result));
}

/** POST /v2/batch: a JSON array of `{destination, headers, body}` (batch docs), all validated before any is enqueued. */
async function batch(ctx: ApiContext, req: IncomingMessage, res: ServerResponse) {
  const raw = await readBody(req, ctx.maxBatchBytes);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new HttpError(400, "batch body must be a JSON array of messages");
  }
  if (!Array.isArray(parsed)) throw new HttpError(400, "batch body must be a JSON array of messages");
  const requests: PublishRequest[] = parsed.map((item: unknown, index) => {
    if (typeof item !== "object" || item === null || Array.isArray(item)) {
      throw new HttpError(400, `batch[${index}] must be an object`);
    }
    const { destination, headers, body } = item as Record<string, unknown>;
    if (typeof destination !== "string" || destination === "") {
      throw new HttpError(400, `batch[${index}].destination must be a non-empty string`);
    }
    if (body !== undefined && body !== null && typeof body !== "string") {
      throw new HttpError(400, `batch[${index}].body must be a string`);
    }
    try {
      return parsePublish(
        destination,
        headerMapFromJson(headers),
        Buffer.from(body ?? "", "utf8"),
        ctx.defaults,
      );
    } catch (error) {
      if (error instanceof HttpError) throw new HttpError(error.status, `batch[${index}]: ${error.message}`);
      throw error;
    }
  });
  if (!(await ctx.beforePublish(res))) return;
  const ip = callerIP(req);
  sendJson(
    res,
    200,
    requests.map((request) => publishAnswer(ctx.broker.publish(request, ip))),
  );
}
