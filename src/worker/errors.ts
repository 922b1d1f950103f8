import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { DomainError, type DomainErrorCode } from "../domain/errors.ts";
import {
  databaseMisconfigurationOf,
  type DatabaseMisconfiguration,
  IDENTITY_ID_DIGITS,
  InvalidInputError,
  messageWithCode,
  PublishError,
  queryFailureText,
  SUBSCRIPTION_NAME,
  UUID_PATTERN,
} from "../outbox/index.ts";
import type { HonoEnv } from "./env.ts";

/**
 * Every error code a caller can see, with the status and headers it answers with;
 * adding a code means adding its row. The two lowercase codes answer QStash on
 * the job routes: 500 asks it to retry on its schedule, 489 with
 * `Upstash-NonRetryable-Error` tells it never to (QStash's own status).
 */
const errorCodes = {
  BAD_REQUEST: { status: 400 },
  UNAUTHORIZED: { status: 401 },
  FORBIDDEN: { status: 403 },
  NOT_FOUND: { status: 404 },
  METHOD_NOT_ALLOWED: { status: 405 },
  CONFLICT: { status: 409 },
  // An If-Match that no longer names the resource: it changed since it was read.
  PRECONDITION_FAILED: { status: 412 },
  PAYLOAD_TOO_LARGE: { status: 413 },
  UNSUPPORTED_MEDIA_TYPE: { status: 415 },
  // An Idempotency-Key sent again with another request (idempotency.ts).
  UNPROCESSABLE_CONTENT: { status: 422 },
  // Too many wrong operator tokens from one address; Retry-After is set with it.
  TOO_MANY_REQUESTS: { status: 429 },
  MISCONFIGURED: { status: 500 },
  INTERNAL_SERVER_ERROR: { status: 500 },
  // A client may try again shortly (the database restarting, out of connections).
  SERVICE_UNAVAILABLE: { status: 503, headers: { "Retry-After": "1" } },
  job_failed: { status: 500 },
  job_rejected: { status: 489, headers: { "Upstash-NonRetryable-Error": "true" } },
} as const satisfies Record<string, { status: number; headers?: Record<string, string> }>;

export type ErrorCode = keyof typeof errorCodes;

const domainToCode = {
  not_found: "NOT_FOUND",
  illegal_transition: "CONFLICT",
} as const satisfies Record<DomainErrorCode, ErrorCode>;

/** One invalid input field: `path` is dotted (`notes.3.title`), empty for the body as a whole. */
export interface FieldIssue {
  path: string;
  message: string;
}

export interface ErrorBody {
  error: { code: ErrorCode; message: string; requestId: string; issues?: FieldIssue[] };
}

/** What handlers throw to answer with a specific code; onError turns it into the envelope. */
export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly issues?: FieldIssue[],
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/**
 * Field issues a 400 or 403 names, at most: a body of 100,000 bad tags answered a
 * 10 MB error listing each of them, which helps no caller. The message says how
 * many more there were.
 */
export const LISTED_ISSUES_MAX = 20;

/** An error for `issues`: `lead` ("invalid body"), then the first LISTED_ISSUES_MAX of them. */
export function issueError(code: ErrorCode, lead: string, issues: FieldIssue[]): ApiError {
  const shown = issues.slice(0, LISTED_ISSUES_MAX);
  const more = issues.length - shown.length;
  const listed =
    shown.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join("; ") +
    (more > 0 ? `; and ${more} more` : "");
  return new ApiError(code, `${lead}: ${listed}`, shown);
}

/**
 * `send`, or a 503 saying what QStash's refusal left as it was (`say`): every
 * operator action that publishes (a job-failure retry, a webhook re-send) changes
 * nothing when QStash does not take its job, so asking again is safe.
 */
export async function orUnavailable<T>(
  send: () => Promise<T>,
  say: (error: PublishError) => string,
): Promise<T> {
  try {
    return await send();
  } catch (error) {
    if (!(error instanceof PublishError)) throw error;
    throw new ApiError("SERVICE_UNAVAILABLE", say(error));
  }
}

/**
 * What was thrown, as an Error. In workerd the Neon driver rejects with its
 * WebSocket's ErrorEvent when the socket fails ("Network connection lost"), not an
 * Error: Hono hands only Errors to onError, so such a rejection escaped as
 * workerd's own 500 page, and Drizzle's wrapper hid it as the cause of a 500. The
 * event's own error says what happened.
 */
export function asError(thrown: unknown): Error {
  if (thrown instanceof Error) return thrown;
  const event = thrown as { error?: unknown; message?: unknown } | null;
  if (event?.error instanceof Error) return event.error;
  if (typeof event?.message === "string") return new Error(event.message);
  return new Error(String(thrown));
}

/**
 * An error as the log gets it: a failed Drizzle query is its driver's reason and
 * the statement, never its parameters, which hold what callers sent (note text, an
 * API key's hash, an endpoint's sealed secret).
 */
export function loggable(error: unknown): unknown {
  return queryFailureText(error, asError) ?? error;
}

/** The one way an error is answered: the envelope, with the code's status and headers. */
export function errorResponse(c: Context<HonoEnv>, code: ErrorCode, message: string, issues?: FieldIssue[]) {
  // requestId is set by the first middleware; an error thrown before it still gets one.
  const requestId = c.get("requestId") ?? crypto.randomUUID();
  const body: ErrorBody = { error: { code, message, requestId, ...(issues ? { issues } : {}) } };
  const entry: { status: number; headers?: Record<string, string> } = errorCodes[code];
  // c.json adds the headers set on the context (request id, a challenge); the status is
  // set on the finished response because Hono's status type has no room for QStash's 489.
  const json = c.json(body, { headers: entry.headers ?? {} });
  return new Response(json.body, { status: entry.status, headers: json.headers });
}

const loggedOnce = new Set<string>();

/**
 * Says a line in the log once per isolate, not once per request: what is wrong for
 * every request alike (a misconfiguration, a binding that fails) would otherwise
 * fill the log.
 */
export function logOnce(line: string): void {
  if (loggedOnce.has(line)) return;
  loggedOnce.add(line);
  console.error(line);
}

/**
 * What a malformed Bearer header's message adds when it has no token at all: `Bearer
 * $ADMIN_TOKEN` with the variable unset sends `Bearer ` (`Bearer` once trimmed), and
 * "must be `Bearer <token>`" alone had the caller look for a typo in the header.
 */
export function noToken(header: string | undefined): string {
  return header !== undefined && /^bearer\s*$/i.test(header)
    ? ", got `Bearer` with no token: is the variable holding it set?"
    : "";
}

/** The app's onError: the only place an exception becomes a response. */
export function handleError(err: Error, c: Context<HonoEnv>) {
  if (err instanceof ApiError) {
    // A binding missing or malformed (validateBindings), or missing where a route needs
    // it (WEBHOOK_SECRETS_KEY), is the operator's to fix, and a webhook job's 500 showed
    // only in QStash's console: said in the log too, once per isolate, not per request.
    if (err.code === "MISCONFIGURED") logOnce(err.message);
    return errorResponse(c, err.code, err.message, err.issues);
  }
  if (err instanceof DomainError) return errorResponse(c, domainToCode[err.code], err.message);
  if (err instanceof InvalidInputError) {
    const { field, message } = err;
    const issues =
      field === undefined ? undefined : [{ path: field, message: message.replace(`${field}: `, "") }];
    return errorResponse(c, "BAD_REQUEST", message, issues);
  }
  if (err instanceof HTTPException) {
    // Raised by Hono itself, e.g. a body that is not JSON, a bodyLimit, bearerAuth.
    const code = httpStatusToCode(err.status);
    // bearerAuth's challenge tells a client which scheme to use; keep it.
    const challenge = err.getResponse().headers.get("WWW-Authenticate");
    if (challenge) {
      c.header("WWW-Authenticate", challenge);
      // RFC 6750: no or a wrong token is 401; a header that is not `Bearer <token>` is 400.
      const basic = challenge.startsWith("Basic");
      const message =
        code !== "UNAUTHORIZED"
          ? `the Authorization header must be \`Bearer <token>\`${noToken(c.req.header("authorization"))}`
          : basic
            ? "operator credentials are required (user admin, password ADMIN_TOKEN)"
            : "a valid operator bearer token (ADMIN_TOKEN) is required";
      return errorResponse(c, code, message);
    }
    return errorResponse(c, code, err.message || defaultMessage[err.status] || code);
  }
  const unavailable = databaseUnavailable(err);
  // Answered 503 below, and expected while the database blips: one line in the
  // driver's words, not its error object (a stack and ~17 fields, the trigger's
  // PL/pgSQL context among them) for every request cut off.
  const said = unavailable
    ? `database unavailable (${unavailable}): ${(queryFailureText(err, asError) ?? messageWithCode(asError(err))).replace(/\s+/g, " ")}`
    : loggable(err);
  console.error(`[${c.get("requestId") ?? "-"}] ${c.req.method} ${c.req.path}:`, said);
  const misconfigured = databaseMisconfigured(err);
  if (misconfigured) {
    // The reason goes to the log, once per isolate; a caller learns only that it is
    // the operator's to fix, not how the database is set up.
    logOnce(`MISCONFIGURED: the database: ${misconfigured}`);
    return errorResponse(
      c,
      "MISCONFIGURED",
      "the service's database settings are wrong; retrying will not help. The operator's log says which",
    );
  }
  if (unavailable)
    return errorResponse(
      c,
      "SERVICE_UNAVAILABLE",
      `the database is unavailable (${unavailable}); try again shortly. A write cut off this way may or may not ` +
        "have committed: resend it with the Idempotency-Key it was sent with (it lands once); without one, " +
        "a resent create may land twice (a tenant has no listing to check first), so send writes with a key",
    );
  return errorResponse(
    c,
    "INTERNAL_SERVER_ERROR",
    "internal error; the request id identifies it in the logs",
  );
}

/**
 * The 404 for a request no route took. A path that a route would take but for an
 * id of the wrong form (`/notes/not-a-uuid`) is a route whose id cannot exist, and
 * is said so, naming the form: "no route" sent callers looking for a typo in the path.
 */
export function handleNotFound(
  c: Context<HonoEnv>,
  routes: readonly { method: string; path: string }[] = [],
) {
  const { method, path } = c.req;
  // A path some route serves, asked with another method: 405 naming the ones it takes
  // (RFC 9110 §15.5.6), or for OPTIONS the list itself. "no route for PUT /notes/<id>"
  // sent callers looking for a typo in a path that was right.
  const allowed = allowedMethods(routes, path);
  if (allowed.length > 0) {
    c.header("Allow", allowed.join(", "));
    if (method === "OPTIONS") return c.body(null, 204);
    return errorResponse(
      c,
      "METHOD_NOT_ALLOWED",
      `${method} is not allowed on ${path}; it takes ${allowed.join(" or ")}`,
    );
  }
  for (const route of routes) {
    if (route.method !== method) continue;
    const misfit = misfitParam(route.path, path);
    if (misfit) {
      const shape = route.path.replace(/\{.*?\}(?=\/|$)/g, "");
      return errorResponse(
        c,
        "NOT_FOUND",
        `no such ${misfit.name}: "${misfit.value}" is not ${misfit.form} (${method} ${shape})`,
      );
    }
  }
  return errorResponse(c, "NOT_FOUND", `no route for ${method} ${path}`);
}

/** The methods the app's routes (not its middleware) take on `path`; GET brings HEAD. */
function allowedMethods(routes: readonly { method: string; path: string }[], path: string): string[] {
  const methods = new Set<string>();
  for (const route of routes) {
    if (route.method === "ALL" || route.path.includes("*")) continue;
    if (servesPath(route.path, path)) methods.add(route.method);
  }
  if (methods.has("GET")) methods.add("HEAD");
  return [...methods];
}

/** Whether a route path (`:name{regex}` segments) takes `path`. */
function servesPath(pattern: string, path: string): boolean {
  const params = matchSegments(pattern, path);
  return params !== null && params.every((p) => p.value !== "" && p.fits);
}

/** What each constrained path parameter's pattern means, as a caller reads it. */
const PARAM_FORMS: Record<string, string> = {
  [UUID_PATTERN]: "a UUID",
  [IDENTITY_ID_DIGITS]: "a whole number from 1",
  [SUBSCRIPTION_NAME]: "a subscription name (a lowercase letter, then lowercase letters, digits, _, . or -)",
};

/**
 * The parameter of `pattern` (a Hono route path with `:name{regex}` segments) whose
 * value in `path` does not fit its regex, when every other segment matches; else null.
 */
function misfitParam(pattern: string, path: string): { name: string; value: string; form: string } | null {
  const params = matchSegments(pattern, path);
  // An empty value is no misfit: "/notes/" is another path, not an id of the wrong form.
  const misfits = params?.filter((p) => p.value !== "" && !p.fits) ?? [];
  if (misfits.length !== 1) return null;
  const { name, value, regex = "" } = misfits[0]!;
  return { name, value: safeDecode(value), form: PARAM_FORMS[regex] ?? `of the form /${regex}/` };
}

/**
 * `path` against a route path, segment by segment: null when their lengths or a
 * literal segment differ, else each parameter's value and whether it fits its regex
 * (one without a regex fits anything). What both the 405 and the 404 read.
 */
function matchSegments(pattern: string, path: string): PathParam[] | null {
  const want = pattern.split("/");
  const got = path.split("/");
  if (want.length !== got.length) return null;
  const params: PathParam[] = [];
  for (const [i, segment] of want.entries()) {
    const value = got[i]!;
    const param = /^:(\w+)(?:\{(.*)\})?$/.exec(segment);
    if (!param) {
      if (segment !== value) return null;
      continue;
    }
    const [, name, regex] = param;
    const fits = regex === undefined || new RegExp(`^(?:${regex})$`).test(value);
    params.push({ name: name!, value, regex, fits });
  }
  return params;
}

interface PathParam {
  name: string;
  value: string;
  regex: string | undefined;
  fits: boolean;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

// Hono raises some refusals without a message; say what was refused and why.
const defaultMessage: Partial<Record<number, string>> = {
  // Only Hono's csrf middleware (dashboard forms) raises a bare 403.
  403: "cross-site request refused: this form can only be posted from the dashboard's own pages (Origin must be this site)",
};

const statusToCode: Partial<Record<number, ErrorCode>> = {
  400: "BAD_REQUEST",
  401: "UNAUTHORIZED",
  // e.g. Hono's csrf middleware refusing a cross-site form post
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  405: "METHOD_NOT_ALLOWED",
  409: "CONFLICT",
  413: "PAYLOAD_TOO_LARGE",
  415: "UNSUPPORTED_MEDIA_TYPE",
  429: "TOO_MANY_REQUESTS",
  503: "SERVICE_UNAVAILABLE",
};

function httpStatusToCode(status: number): ErrorCode {
  return statusToCode[status] ?? (status >= 500 ? "INTERNAL_SERVER_ERROR" : "BAD_REQUEST");
}

/** The error and the causes under it, as Errors, at most five deep: Drizzle wraps a driver's error. */
function* causeChain(err: unknown): Generator<Error> {
  let e: Error | undefined = asError(err);
  for (let depth = 0; e !== undefined && depth < 5; depth++) {
    yield e;
    e = e.cause === undefined ? undefined : asError(e.cause);
  }
}

/**
 * Whether the database turned the Worker away for its configuration, and why in a
 * few words: no retry helps (wrong password or user, no such database, a schema older
 * than this Worker because it was deployed before `migrate`). It was answered as a
 * 503 with Retry-After, or a bare 500, and the operator had to read the driver's
 * words in the log to learn it was theirs to fix.
 */
export function databaseMisconfigured(err: unknown): string | undefined {
  const found = databaseMisconfiguration(err);
  return found && MISCONFIGURED_WORDS[found];
}

/** Which of the settings faults `databaseMisconfigured` words an error is, if any. */
export function databaseMisconfiguration(err: unknown): DatabaseMisconfiguration | undefined {
  for (const e of causeChain(err)) {
    const found = databaseMisconfigurationOf((e as { code?: unknown }).code);
    if (found) return found;
  }
  return undefined;
}

const MISCONFIGURED_WORDS: Record<DatabaseMisconfiguration, string> = {
  credentials: "it refused the credentials in DATABASE_URL",
  no_database: "the database named in DATABASE_URL does not exist",
  schema: "a table or column this Worker reads is missing: run migrate, then deploy",
  privileges: "the role in DATABASE_URL may not read or write what this Worker needs",
};

/** What the drivers say when the socket went away or never came (no SQLSTATE then). */
const UNAVAILABLE_MESSAGE =
  /connection terminated|network connection lost|connection error|ECONNREFUSED|ECONNRESET|the database system is (starting up|shutting down)/i;

/**
 * Whether an error is the database being out of reach, and why in a few plain
 * words (no driver text reaches the client): a 503 the client may retry, not a
 * 500 bug. SQLSTATEs: connection exceptions (class 08), the server shutting down
 * or starting (57P01–57P03), no connection slot left (53300). Drizzle wraps
 * driver errors, so the causes are walked.
 */
export function databaseUnavailable(err: unknown): string | undefined {
  for (const e of causeChain(err)) {
    const code = (e as { code?: unknown }).code;
    if (code === "53300") return "too many clients: no connection slot left";
    if (typeof code === "string" && /^57P0[123]$/.test(code)) return "the database is restarting";
    if (/timeout exceeded when trying to connect/i.test(e.message)) return "connection timeout";
    if ((typeof code === "string" && /^08...$/.test(code)) || UNAVAILABLE_MESSAGE.test(e.message))
      return "connection lost or refused";
  }
  return undefined;
}
