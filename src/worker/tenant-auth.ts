import type { Context, MiddlewareHandler } from "hono";
import { matchedRoutes } from "hono/route";
import { authenticate, type Tenant } from "../domain/api-keys/keys.ts";
import type { HonoEnv } from "./env.ts";
import { ApiError, issueError, noToken, type FieldIssue } from "./errors.ts";
import { isSafeMethod } from "./methods.ts";
import { spendKeyBudget } from "./rate-limit.ts";

/**
 * The paths that are not a tenant's: each has a guard of its own (the operator token,
 * QStash's signature, the dashboard's session) or needs none (the health check).
 * Every other path is a domain route's, which takes a tenant API key and acts only in
 * its scope. It was the other way round, a list of the domain's prefixes: a team that
 * added `/orders` as the docs describe got routes that answered without a key and
 * acted in every scope (`c.var.tenant` undefined, so unscoped), and no check said so.
 * Now a route under a new prefix is behind a key from its first line.
 */
const NOT_A_TENANTS = /^\/(admin|jobs|dashboard)(\/|$)|^\/healthz$/;

/** Whether `path` is a domain route's (a tenant's), not an operator's, a job's, the dashboard's or /healthz. */
export const isDomainPath = (path: string): boolean => !NOT_A_TENANTS.test(path);
const REALM = 'Bearer realm="edge-outbox"';

/**
 * `Authorization: Bearer <api key>` on every domain route, checked before the
 * route (and its body) is looked at. No key, or another scheme's credentials
 * (Basic, a bare key): 401 with a plain challenge (RFC 6750 §3.1: a client that
 * used an unsupported method gets no error code); a Bearer header that is
 * malformed (no token, two): 400 invalid_request; an unknown or revoked key: 401
 * invalid_token; a key over its request budget: 429 with Retry-After. The
 * key's scope is `c.var.tenant` for the route.
 */
export const tenantAuth: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (!isDomainPath(c.req.path)) return next();
  const header = c.req.header("authorization");
  if (!header || !isBearer(header)) {
    c.header("WWW-Authenticate", REALM);
    throw new ApiError(
      "UNAUTHORIZED",
      `an API key is required: Authorization: Bearer <key>${header ? " (this header's scheme is not Bearer)" : ""}`,
    );
  }
  const match = header.match(/^Bearer +([\x21-\x7e]+) *$/i);
  if (!match) {
    c.header("WWW-Authenticate", `${REALM}, error="invalid_request"`);
    throw new ApiError("BAD_REQUEST", `the Authorization header must be \`Bearer <key>\`${noToken(header)}`);
  }
  const tenant = await authenticate(c.var.db, match[1]!);
  if (!tenant) {
    c.header("WWW-Authenticate", `${REALM}, error="invalid_token"`);
    throw new ApiError("UNAUTHORIZED", "unknown or revoked API key");
  }
  c.set("tenant", tenant);
  await spendKeyBudget(c, tenant);
  await next();
};

/**
 * Writes land in the key's scope. A body that names a scope must name that one:
 * another is a 403, never silently rewritten, so a caller who meant another
 * tenant learns it used the wrong key instead of finding data in the wrong place.
 */
export function ownScope(
  c: Context<HonoEnv>,
  asked: (string | null | undefined)[],
  path: (i: number) => string,
) {
  const tenant: Tenant = c.var.tenant;
  const issues: FieldIssue[] = [];
  asked.forEach((scope, i) => {
    if (scope !== undefined && scope !== tenant.scope)
      issues.push({
        path: path(i),
        message: `must be this key's scope (${describe(tenant.scope)}) or left out`,
      });
  });
  if (issues.length > 0)
    throw issueError("FORBIDDEN", `this API key acts only in scope ${describe(tenant.scope)}`, issues);
  return tenant.scope;
}

function describe(scope: string | null): string {
  return scope === null ? "null (no scope)" : JSON.stringify(scope);
}

/** Whether an Authorization header is of the Bearer scheme at all, well formed or not. */
export function isBearer(header: string): boolean {
  return /^bearer(?:\s|$)/i.test(header);
}

/**
 * A write takes its input in its body. A query parameter on one was ignored:
 * `POST /notes?scope=globex` wrote into the key's own scope, answering 201, to a
 * caller who thought it had named another; `DELETE /admin/webhooks/endpoints/<id>?dryRun=true`
 * deleted the endpoint. Refused before the write runs, as every route refuses a field
 * it does not know. Reads keep their own query rules.
 */
function refuseQueryOnWrite(c: Context<HonoEnv>): void {
  // Only a request some route takes: `POST /notes/search?q=x` is a 405 and
  // `DELETE /nothing?x=1` a 404, which this 400 had answered before routing could.
  const routed = () => matchedRoutes(c).some((route) => route.method === c.req.method);
  if (isSafeMethod(c.req.method) || !routed()) return;
  const names = [...new Set(new URL(c.req.url).searchParams.keys())];
  if (names.length > 0)
    throw issueError(
      "BAD_REQUEST",
      "a write takes its input in its JSON body, not the query",
      names.map((name) => ({ path: `query.${name}`, message: "is not a known field" })),
    );
}

/** refuseQueryOnWrite for the domain's routes, after the tenant's key is checked. */
export const noQueryOnWrites: MiddlewareHandler<HonoEnv> = async (c, next) => {
  if (isDomainPath(c.req.path)) refuseQueryOnWrite(c);
  await next();
};

/** refuseQueryOnWrite for the operator's routes, mounted after their token is checked. */
export const noQueryOnOperatorWrites: MiddlewareHandler<HonoEnv> = async (c, next) => {
  refuseQueryOnWrite(c);
  await next();
};
