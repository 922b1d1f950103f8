import { configSchema } from "../src/worker/env.ts";

/**
 * The Worker's bindings under `npm run dev` (written to .dev.vars): what the local
 * stack set up (`stack`: its database, QStash, sink and tokens, environment values
 * already chosen over generated ones), then every other binding the Worker reads
 * that the environment sets — RETENTION_DAYS, MAX_BODY_BYTES,
 * WEBHOOK_RETRY_SCHEDULE=1,1,1 to watch retries run out in seconds, … —, so any
 * binding README "Deploying for real" lists can be tried locally. Taken from the
 * Worker's own schema, so a binding added there passes through without a change here.
 */
export function devVars(stack: Record<string, string>, env: NodeJS.ProcessEnv): Record<string, string> {
  const vars = { ...stack };
  for (const name of Object.keys(configSchema.shape)) {
    const value = env[name];
    if (!Object.hasOwn(vars, name) && value) vars[name] = value;
  }
  return vars;
}
