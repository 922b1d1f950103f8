import type { MiddlewareHandler } from "hono";
import { parseConfig, type ConfigResult, type HonoEnv } from "./env.ts";
import { ApiError } from "./errors.ts";

// Bindings do not change within an isolate, so each env object is parsed once (and
// onError logs each distinct misconfiguration once, not once per request).
const parsed = new WeakMap<object, ConfigResult>();

/** Validates the bindings before anything else runs; a bad one answers 500 naming it. */
export const validateBindings: MiddlewareHandler<HonoEnv> = async (c, next) => {
  const env = c.env ?? {};
  let result = parsed.get(env);
  if (!result) {
    result = parseConfig(env);
    parsed.set(env, result);
  }
  if (!result.ok) throw new ApiError("MISCONFIGURED", result.message);
  c.set("config", result.config);
  await next();
};
