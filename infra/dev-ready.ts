/**
 * What `npm run dev` makes of one `/healthz` answer while it waits for `wrangler dev`:
 * ready, not yet, or a Worker that will never be ready as configured. A bad binding
 * (`RETENTION_DAYS=abc`, a short `ADMIN_TOKEN`) answers every request 500
 * MISCONFIGURED naming it, and the stack polled that answer for 2 minutes before
 * saying only that the Worker "did not answer /healthz within 120 s" (the config
 * walkthrough). Anything else that is not a 200 (wrangler still starting, a 503) is
 * waited out.
 */
export type HealthzVerdict = { ready: true } | { ready: false; fatal?: string };

export function healthzVerdict(status: number, body: string): HealthzVerdict {
  if (status >= 200 && status < 300) return { ready: true };
  if (status !== 500) return { ready: false };
  let error: { code?: unknown; message?: unknown } | undefined;
  try {
    error = (JSON.parse(body) as { error?: { code?: unknown; message?: unknown } }).error;
  } catch {
    return { ready: false };
  }
  if (error?.code !== "MISCONFIGURED" || typeof error.message !== "string") return { ready: false };
  return { ready: false, fatal: `the Worker answers /healthz 500: ${error.message}` };
}
