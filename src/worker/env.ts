import { z } from "zod";
import { blankIsAbsent } from "../domain/text.ts";
import type { Tenant } from "../domain/api-keys/keys.ts";
import type { Db } from "../domain/db.ts";
import { DEFAULT_DISABLE_AFTER_DAYS } from "../domain/webhooks/auto-disable.ts";
import { parseRetrySchedule, WEBHOOK_RETRY_SCHEDULE_SECONDS } from "../domain/webhooks/retry-schedule.ts";
import { DEFAULT_MAX_BODY_BYTES } from "./body-limit.ts";
import {
  deploymentLabel,
  QSTASH_BATCH_LIMITS,
  QSTASH_LABEL,
  RELAY_POLICY,
  type Queryable,
  type SqlPool,
} from "../outbox/index.ts";

/** What wrangler hands the Worker: vars and secrets, all strings, any of them possibly absent. */
export interface Bindings {
  DATABASE_URL?: string;
  QSTASH_URL?: string;
  QSTASH_TOKEN?: string;
  QSTASH_CURRENT_SIGNING_KEY?: string;
  QSTASH_NEXT_SIGNING_KEY?: string;
  PUBLIC_URL?: string;
  ADMIN_TOKEN?: string;
  MAIL_API_URL?: string;
  /**
   * Who `notify.mail` writes to about supplier events: required with MAIL_API_URL;
   * without it (no mail sent) ops@example.com names the no-op mailer's recipient.
   */
  MAIL_TO?: string;
  /**
   * Where the cron sweep posts each new open alert, as JSON with a `text` (an incoming
   * chat webhook's shape) and the alerts themselves (ADR 0046); unset, nothing is posted.
   */
  ALERT_WEBHOOK_URL?: string;
  /** Days a fanned event is kept before the cron sweep deletes it; default 30. */
  RETENTION_DAYS?: string;
  /** Largest request body accepted, in bytes (413 above it); default 1 MB. */
  MAX_BODY_BYTES?: string;
  /** Local stack only: `host:port` of the WebSocket-to-TCP proxy in front of a plain Postgres. */
  NEON_WS_PROXY?: string;
  /**
   * Local stack only: "off" when the Postgres behind NEON_WS_PROXY does not use
   * `password` authentication (trust, scram-sha-256), which refuses a pipelined connect.
   */
  NEON_PIPELINE_CONNECT?: string;
  /** Base64 of 32 random bytes: the AES-GCM key webhook endpoint secrets are sealed under. */
  WEBHOOK_SECRETS_KEY?: string;
  /** "true": webhook URLs may use http and private or loopback addresses (the local stack). */
  WEBHOOK_ALLOW_PRIVATE_URLS?: string;
  /** Hours a rotated-out webhook secret keeps signing beside the new one; default 24. */
  WEBHOOK_SECRET_ROTATION_HOURS?: string;
  /** Seconds before each webhook retry, comma-separated; default the Svix-like schedule (retry-schedule.ts). */
  WEBHOOK_RETRY_SCHEDULE?: string;
  /** Days of nothing but failed deliveries before the cron sweep disables an endpoint; default 5. */
  WEBHOOK_DISABLE_AFTER_DAYS?: string;
  /**
   * Longest wait, in whole seconds, between relay passes during a transport
   * outage (the backoff doubles from 2 s up to it); default 60. The chaos suite
   * shortens it to time-scale its outage.
   */
  RELAY_BACKOFF_CAP_SECONDS?: string;
  /**
   * Messages per QStash batch request, at most, 1–1000; default 500 (ADR 0025). Lower
   * it if your QStash refuses large batches.
   */
  QSTASH_BATCH_MESSAGES?: string;
  /**
   * The label every job this deployment publishes carries, and what the cron sweep
   * finds its dead letters by; default `edge-outbox-<PUBLIC_URL's host>` (ADR 0027).
   */
  QSTASH_LABEL?: string;
  /**
   * Cloudflare's Rate Limiting binding (wrangler.toml `[[ratelimits]]`): each tenant API
   * key's request budget (src/worker/rate-limit.ts). Not a var: absent, nothing is limited.
   */
  API_RATE_LIMIT?: RateLimit;
}

/** Upstash's QStash: where jobs go when QSTASH_URL is unset. */
export const DEFAULT_QSTASH_URL = "https://qstash.upstash.io";

// wrangler passes an unset var as "" when it is declared empty; that means unset.
const optional = <T extends z.ZodType>(schema: T) => z.preprocess(blankIsAbsent, schema.optional());

const httpUrl = z.url({ protocol: /^https?$/, error: "must be an http(s) URL" });
const secret = z.string().trim().min(1, "must not be empty");
/** A var that must be a whole number of `unit` (plural): the same message whether it is not a number or a fraction. */
const wholeNumberOf = (unit: string) => {
  const message = `must be a whole number of ${unit}`;
  return z.coerce.number({ error: message }).int(message);
};

export const configSchema = z.object({
  DATABASE_URL: z
    .string()
    .trim()
    .refine(
      (v) => /^postgres(ql)?:\/\//.test(v) && URL.canParse(v),
      "must be a postgres:// or postgresql:// connection string",
    ),
  QSTASH_URL: optional(httpUrl).transform((v) => stripSlash(v ?? DEFAULT_QSTASH_URL)),
  QSTASH_TOKEN: secret,
  QSTASH_CURRENT_SIGNING_KEY: secret,
  QSTASH_NEXT_SIGNING_KEY: secret,
  // Subscriber URLs are built from it and QStash signs them, so it must be exact.
  // An origin only: the routes are at the Worker's root, so with a path (a proxy's
  // prefix) QStash's jobs reached a route that is none and were refused for hours.
  PUBLIC_URL: httpUrl
    .refine(
      isOrigin,
      "must be the Worker's origin alone, e.g. https://outbox.example.com: its routes are at the root, so a path, query or fragment sends QStash's jobs nowhere",
    )
    .transform(stripSlash),
  // The dashboard and requeue sit behind it: a short token is a guessable one.
  ADMIN_TOKEN: z.string().trim().min(16, "must be at least 16 characters"),
  MAIL_API_URL: optional(httpUrl),
  MAIL_TO: optional(z.email({ error: "must be an e-mail address" })).transform((v) => v ?? "ops@example.com"),
  ALERT_WEBHOOK_URL: optional(httpUrl),
  // Vars are strings; a fractional or zero retention is a typo, not a policy.
  RETENTION_DAYS: optional(wholeNumberOf("days").min(1, "must be at least 1 day")).transform((v) => v ?? 30),
  MAX_BODY_BYTES: optional(wholeNumberOf("bytes").min(1024, "must be at least 1024 bytes")).transform(
    (v) => v ?? DEFAULT_MAX_BODY_BYTES,
  ),
  NEON_WS_PROXY: optional(z.string().regex(/^[\w.-]+:\d{1,5}$/, "must be host:port, e.g. 127.0.0.1:5433")),
  NEON_PIPELINE_CONNECT: optional(
    z.enum(["password", "off"], { error: 'must be "password" (the default) or "off"' }),
  ).transform((v) => v !== "off"),
  // Optional so a deployment without webhooks keeps running; the endpoint routes
  // that seal or open a secret answer 500 naming it when it is absent. A malformed
  // key fails every route, like any malformed binding: it would fail later anyway.
  WEBHOOK_SECRETS_KEY: optional(
    z.string().trim().refine(isBase64Key, "must be base64 of 32 bytes (e.g. `openssl rand -base64 32`)"),
  ),
  WEBHOOK_ALLOW_PRIVATE_URLS: optional(
    z.enum(["true", "false"], { error: 'must be "true" or "false"' }),
  ).transform((v) => v === "true"),
  WEBHOOK_SECRET_ROTATION_HOURS: optional(
    wholeNumberOf("hours")
      .min(0, "must be 0 (the old secret stops at once) or more")
      .max(24 * 30, "must be at most 720 hours (30 days)"),
  ).transform((v) => v ?? 24),
  WEBHOOK_RETRY_SCHEDULE: optional(z.string()).transform((v, ctx) => {
    if (v === undefined) return WEBHOOK_RETRY_SCHEDULE_SECONDS;
    const parsed = parseRetrySchedule(v);
    if (parsed.ok) return parsed.seconds;
    ctx.addIssue({ code: "custom", message: parsed.message });
    return z.NEVER;
  }),
  WEBHOOK_DISABLE_AFTER_DAYS: optional(wholeNumberOf("days").min(1, "must be at least 1 day")).transform(
    (v) => v ?? DEFAULT_DISABLE_AFTER_DAYS,
  ),
  // Longer than an hour only delays recovery after an outage: every sweep stops on the
  // backoff too, until it ends or an operator ends it (`relay drain --now`).
  RELAY_BACKOFF_CAP_SECONDS: optional(
    wholeNumberOf("seconds")
      .min(1, "must be at least 1 second")
      .max(3600, "must be at most 3600 seconds (an hour)"),
  ).transform((v) => v ?? RELAY_POLICY.passBackoff.capSeconds),
  QSTASH_BATCH_MESSAGES: optional(
    wholeNumberOf("messages").min(1, "must be at least 1 message").max(1000, "must be at most 1000 messages"),
  ).transform((v) => v ?? QSTASH_BATCH_LIMITS.messages),
  // Resolved against PUBLIC_URL by qstashLabelFor, which every publisher and the sweep use.
  QSTASH_LABEL: optional(
    z.string().trim().regex(QSTASH_LABEL, 'must be letters, digits, "_" or "-", e.g. edge-outbox-prod'),
  ),
});

/** Bindings after validation: what handlers read, via `c.var.config`. */
export type Config = z.output<typeof configSchema>;

/** The label this deployment's jobs carry: QSTASH_LABEL, or one made from PUBLIC_URL's host. */
export function qstashLabelFor(config: Pick<Config, "QSTASH_LABEL" | "PUBLIC_URL">): string {
  return config.QSTASH_LABEL ?? deploymentLabel(config.PUBLIC_URL);
}

export type ConfigResult = { ok: true; config: Config } | { ok: false; message: string };

/** One message naming every bad binding, e.g. "binding QSTASH_TOKEN is missing; binding PUBLIC_URL must be …". */
export function parseConfig(env: Bindings): ConfigResult {
  const parsed = parseVariables(configSchema, env);
  const problems = parsed.ok
    ? []
    : parsed.problems.map((p) => `binding ${p.name} ${p.missing ? "is missing" : p.message}`);
  // Mail sent for real goes to MAIL_TO: its default is for a Worker that sends none
  // (the no-op mailer's log line). A deployment that set only MAIL_API_URL mailed
  // every supplier event to ops@example.com, which nobody reads (the deploy walkthrough).
  if (blankIsAbsent(env.MAIL_API_URL) !== undefined && blankIsAbsent(env.MAIL_TO) === undefined)
    problems.push("binding MAIL_TO must be set with MAIL_API_URL: the address supplier mails go to");
  if (parsed.ok && problems.length === 0) return parsed;
  return { ok: false, message: `Worker misconfigured: ${problems.join("; ")}` };
}

export interface VariableProblem {
  name: string;
  /** Unset or blank, as opposed to set to something invalid. */
  missing: boolean;
  message: string;
}

/**
 * Checks variables against the Worker's schema, or part of it
 * (`configSchema.pick(...)`): the CLI reads the same variables with the same
 * defaults and rules, and says what is wrong in its own words.
 */
export function parseVariables<T extends z.ZodType>(
  schema: T,
  env: object,
): { ok: true; config: z.output<T> } | { ok: false; problems: VariableProblem[] } {
  const parsed = schema.safeParse(env);
  if (parsed.success) return { ok: true, config: parsed.data };
  const problems = parsed.error.issues.map((issue) => {
    const name = String(issue.path[0] ?? "?");
    const value: unknown = Reflect.get(env, name);
    const missing = value === undefined || (typeof value === "string" && value.trim() === "");
    return { name, missing, message: issue.message };
  });
  return { ok: false, problems };
}

export interface Variables {
  requestId: string;
  config: Config;
  db: Db;
  pool: SqlPool & Queryable;
  /**
   * Work that must finish after the response (a relay kick) on the request's own
   * database pool; the pool is ended only once all of it has settled.
   */
  background: (task: Promise<unknown>) => void;
  /** The caller of a domain route: its API key and the one scope it acts in (tenant-auth.ts). */
  tenant: Tenant;
  /** Seconds a write may wait for its fan-out (`Prefer: wait=N`, clamped); undefined: do not wait. */
  wait: number | undefined;
}

export type HonoEnv = { Bindings: Bindings; Variables: Variables };

function isBase64Key(text: string): boolean {
  try {
    return atob(text).length === 32;
  } catch {
    return false;
  }
}

function isOrigin(url: string): boolean {
  try {
    const u = new URL(url);
    return u.pathname === "/" && u.search === "" && u.hash === "" && !/[?#]/.test(url);
  } catch {
    return true; // said by httpUrl
  }
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/, "");
}
