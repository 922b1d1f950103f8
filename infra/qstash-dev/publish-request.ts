import { validateHeaderName, validateHeaderValue } from "node:http";
import { parseDuration } from "./duration.ts";
import { HttpError, canonicalHeaderName } from "./http-util.ts";
import { parseRetryDelayExpression } from "./retry-delay-expression.ts";
import type { DeliveryOptions, FlowControl } from "./types.ts";

/** Header names lower-cased, one value each (Node joins repeated headers with ", "). */
export type HeaderMap = Map<string, string>;

export interface PublishDefaults {
  retries: number;
  timeoutMs: number;
  maxBodyBytes: number;
}

export interface PublishRequest {
  destination: string;
  body: Buffer;
  options: DeliveryOptions;
  /** Absolute epoch ms from Upstash-Not-Before; wins over Upstash-Delay (publish docs). */
  notBefore?: number;
  deduplicationId?: string;
  contentBasedDeduplication: boolean;
  callback?: string;
  failureCallback?: string;
  callbackOptions: DeliveryOptions;
  failureCallbackOptions: DeliveryOptions;
  flowControl?: FlowControl;
  labels?: string[];
}

/** The Upstash-Method enum in QStash's OpenAPI spec. */
const METHODS = new Set(["GET", "POST", "PUT", "PATCH", "DELETE"]);

export function headerMapFromNode(headers: Record<string, string | string[] | undefined>): HeaderMap {
  const map: HeaderMap = new Map();
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    map.set(name.toLowerCase(), Array.isArray(value) ? value.join(", ") : value);
  }
  return map;
}

export function headerMapFromJson(value: unknown): HeaderMap {
  const map: HeaderMap = new Map();
  if (value === undefined || value === null) return map;
  if (typeof value !== "object" || Array.isArray(value))
    throw new HttpError(400, "headers must be an object");
  for (const [name, v] of Object.entries(value)) {
    let text: string;
    if (typeof v === "string") text = v;
    else if (Array.isArray(v) && v.every((item) => typeof item === "string")) text = v.join(", ");
    else throw new HttpError(400, `header ${name} must be a string`);
    // Batch headers arrive as JSON, not through Node's parser: refuse what could never be
    // sent (CR/LF, bad names) now, instead of failing every delivery attempt later.
    try {
      validateHeaderName(name);
      validateHeaderValue(name, text);
    } catch {
      throw new HttpError(400, `invalid header ${JSON.stringify(name)}`);
    }
    map.set(name.toLowerCase(), text);
  }
  return map;
}

/**
 * Only http(s) URLs are accepted. QStash would also take a URL Group name or
 * `api/llm` here; this dev server has neither, so anything else is a 400 (a guess
 * at the status: QStash documents no exact answer for an unknown destination).
 */
export function validateDestination(destination: string): string {
  let url: URL;
  try {
    url = new URL(destination);
  } catch {
    throw new HttpError(400, `invalid destination url: ${JSON.stringify(destination)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new HttpError(400, `invalid destination url: ${JSON.stringify(destination)}, want http(s)`);
  }
  return destination;
}

function validateCallbackUrl(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    const url = new URL(value);
    if (url.protocol === "http:" || url.protocol === "https:") return value;
  } catch {
    // fall through
  }
  throw new HttpError(400, `invalid ${name} url: ${JSON.stringify(value)}`);
}

/**
 * Reads the delivery settings under a header prefix: `upstash-` for the message
 * itself, `upstash-callback-` / `upstash-failure-callback-` for its callbacks
 * (the callbacks docs list Method, Delay, Retries, Timeout and Forward-* for those).
 */
function parseOptions(headers: HeaderMap, prefix: string, defaults: PublishDefaults): DeliveryOptions {
  const get = (name: string) => headers.get(prefix + name);
  const method = (get("method") ?? "POST").toUpperCase();
  if (!METHODS.has(method)) throw new HttpError(400, `invalid ${prefix}method: ${method}`);

  let delayMs = 0;
  const delay = get("delay");
  if (delay !== undefined) {
    const parsed = parseDuration(delay);
    if (parsed === undefined || parsed < 0) throw new HttpError(400, `invalid ${prefix}delay: ${delay}`);
    delayMs = parsed;
  }

  let retries = defaults.retries;
  const retriesHeader = get("retries");
  if (retriesHeader !== undefined) {
    if (!/^\d+$/.test(retriesHeader.trim()))
      throw new HttpError(400, `invalid ${prefix}retries: ${retriesHeader}`);
    retries = Number(retriesHeader);
  }

  let timeoutMs = defaults.timeoutMs;
  const timeout = get("timeout");
  if (timeout !== undefined) {
    const parsed = parseDuration(timeout);
    if (parsed === undefined || parsed <= 0) throw new HttpError(400, `invalid ${prefix}timeout: ${timeout}`);
    timeoutMs = parsed;
  }

  const retryDelayExpression = get("retry-delay");
  if (retryDelayExpression !== undefined) parseRetryDelayExpression(retryDelayExpression); // 400 if invalid

  const forwardHeaders: Record<string, string> = {};
  const forwardPrefix = `${prefix}forward-`;
  for (const [name, value] of headers) {
    if (name.startsWith(forwardPrefix) && name.length > forwardPrefix.length) {
      forwardHeaders[canonicalHeaderName(name.slice(forwardPrefix.length))] = value;
    }
  }
  return { method, delayMs, retries, timeoutMs, retryDelayExpression, forwardHeaders };
}

/** `parallelism=1, rate=10, period=1s`, the format the SDK builds for Upstash-Flow-Control-Value. */
function parseFlowControl(headers: HeaderMap): FlowControl | undefined {
  const key = headers.get("upstash-flow-control-key");
  const value = headers.get("upstash-flow-control-value");
  if (key === undefined) return undefined;
  if (key.trim() === "") throw new HttpError(400, "upstash-flow-control-key must not be empty");
  const control: FlowControl = { key, periodMs: 1000 };
  for (const part of (value ?? "").split(",")) {
    const [rawName, rawValue] = part.split("=").map((s) => s.trim());
    if (!rawName) continue;
    if (rawValue === undefined) throw new HttpError(400, `invalid upstash-flow-control-value: ${value}`);
    if (rawName === "parallelism" || rawName === "rate") {
      if (!/^\d+$/.test(rawValue) || Number(rawValue) < 1) {
        throw new HttpError(400, `invalid ${rawName} in upstash-flow-control-value: ${rawValue}`);
      }
      control[rawName] = Number(rawValue);
    } else if (rawName === "period") {
      const period = parseDuration(rawValue);
      if (period === undefined || period <= 0) throw new HttpError(400, `invalid period: ${rawValue}`);
      control.periodMs = period;
    } else {
      throw new HttpError(400, `unknown upstash-flow-control-value field: ${rawName}`);
    }
  }
  if (control.parallelism === undefined && control.rate === undefined) {
    throw new HttpError(400, "upstash-flow-control-value needs parallelism or rate");
  }
  return control;
}

/** Turns a publish (or one batch entry) into a validated request; throws HttpError(400/413). */
export function parsePublish(
  destination: string,
  headers: HeaderMap,
  body: Buffer,
  defaults: PublishDefaults,
): PublishRequest {
  validateDestination(destination);
  if (body.length > defaults.maxBodyBytes) {
    throw new HttpError(413, `message body exceeds the maximum size of ${defaults.maxBodyBytes} bytes`);
  }
  const options = parseOptions(headers, "upstash-", defaults);
  // The receiving docs: the destination gets "the original Content-Type header".
  const contentType = headers.get("content-type");
  if (contentType !== undefined) options.forwardHeaders["Content-Type"] = contentType;

  let notBefore: number | undefined;
  const notBeforeHeader = headers.get("upstash-not-before");
  if (notBeforeHeader !== undefined) {
    if (!/^\d+$/.test(notBeforeHeader.trim())) {
      throw new HttpError(400, `invalid upstash-not-before: ${notBeforeHeader}`);
    }
    notBefore = Number(notBeforeHeader) * 1000; // unix seconds per the publish docs
  }

  const deduplicationId = headers.get("upstash-deduplication-id");
  if (deduplicationId !== undefined && deduplicationId.trim() === "") {
    throw new HttpError(400, "upstash-deduplication-id must not be empty");
  }

  return {
    destination,
    body,
    options,
    notBefore,
    deduplicationId,
    contentBasedDeduplication: headers.get("upstash-content-based-deduplication")?.toLowerCase() === "true",
    callback: validateCallbackUrl("upstash-callback", headers.get("upstash-callback")),
    failureCallback: validateCallbackUrl("upstash-failure-callback", headers.get("upstash-failure-callback")),
    // OpenAPI spec: callback retries default to "same as original message retries".
    callbackOptions: parseOptions(headers, "upstash-callback-", { ...defaults, retries: options.retries }),
    failureCallbackOptions: parseOptions(headers, "upstash-failure-callback-", {
      ...defaults,
      retries: options.retries,
    }),
    flowControl: parseFlowControl(headers),
    labels: parseLabels(headers.get("upstash-label")),
  };
}

/**
 * `Upstash-Label: a` or `a,b`: the SDK joins a `label: string[]` with commas. QStash's
 * docs name no character set for a label, so none is enforced beyond the header's own;
 * a header of nothing but commas and spaces names no label and is refused.
 */
function parseLabels(header: string | undefined): string[] | undefined {
  if (header === undefined) return undefined;
  const labels = header
    .split(",")
    .map((label) => label.trim())
    .filter((label) => label !== "");
  if (labels.length === 0) throw new HttpError(400, "upstash-label must name at least one label");
  return [...new Set(labels)];
}

export interface DlqRetryOverrides {
  options: Partial<DeliveryOptions>;
  callback?: string;
  failureCallback?: string;
}

/**
 * Headers on POST /v2/dlq/retry override the original message's settings (the retry
 * docs' example: `Upstash-Retries: 0`). Only headers actually present override.
 */
export function parseRetryOverrides(headers: HeaderMap, defaults: PublishDefaults): DlqRetryOverrides {
  const parsed = parseOptions(headers, "upstash-", defaults);
  const options: Partial<DeliveryOptions> = {};
  if (headers.has("upstash-method")) options.method = parsed.method;
  if (headers.has("upstash-delay")) options.delayMs = parsed.delayMs;
  if (headers.has("upstash-retries")) options.retries = parsed.retries;
  if (headers.has("upstash-timeout")) options.timeoutMs = parsed.timeoutMs;
  if (headers.has("upstash-retry-delay")) options.retryDelayExpression = parsed.retryDelayExpression;
  if (Object.keys(parsed.forwardHeaders).length > 0) options.forwardHeaders = parsed.forwardHeaders;
  return {
    options,
    callback: validateCallbackUrl("upstash-callback", headers.get("upstash-callback")),
    failureCallback: validateCallbackUrl("upstash-failure-callback", headers.get("upstash-failure-callback")),
  };
}
