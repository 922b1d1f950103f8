import type { Context } from "hono";
import { handleError, type ErrorBody } from "../errors.ts";
import type { DashboardEnv } from "./env.ts";
import { focusedOnLoad, render } from "./layout.tsx";

/**
 * Errors on dashboard pages are pages, not JSON. The status and message come
 * from the Worker's one error mapping (handleError), so the dashboard and the
 * API never disagree about what an error is; the message renders escaped.
 */
export async function dashboardError(err: Error, c: Context<DashboardEnv>) {
  const res = handleError(err, c);
  const body = (await res.json()) as ErrorBody;
  // Every status the mapping can give; one missing here turned a 413 or 415 into a 500.
  const status =
    ([400, 401, 403, 404, 405, 409, 413, 415, 429, 503] as const).find((s) => s === res.status) ?? 500;
  return render(
    c,
    // Signed in, the header stays: a refused form's page was a dead end with one link.
    { title: `${res.status} ${body.error.code}`, section: c.get("signedIn") ? "elsewhere" : "none" },
    <div class="panel">
      <h1>{`${res.status} ${body.error.code}`}</h1>
      {/* Focused and announced: after a refused form, focus started at the top of the page. */}
      <p class="error" role="alert" {...focusedOnLoad()}>
        {body.error.message}
      </p>
      <p class="muted">{`request ${body.error.requestId}`}</p>
      <p>
        <a href="/dashboard">Back to the overview</a>
      </p>
    </div>,
    status,
  );
}
