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
  // In words ("404 Not found"): a screen reader read the code's capitals and underscore.
  const heading = `${res.status} ${codeInWords(body.error.code)}`;
  return render(
    c,
    // Signed in, the header stays: a refused form's page was a dead end with one link.
    { title: heading, section: c.get("signedIn") ? "elsewhere" : "none" },
    <div class="panel">
      <h1>{heading}</h1>
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

/** `NOT_FOUND` or `illegal_transition` as "Not found", "Illegal transition". */
function codeInWords(code: string): string {
  const words = code.toLowerCase().replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}
