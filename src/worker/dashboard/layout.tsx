import type { Context } from "hono";
import { raw } from "hono/html";
import type { Child } from "hono/jsx";
import type { DashboardEnv } from "./env.ts";

/** The page's place in the header ("elsewhere": the header, no link current; "none": no header). */
export type Section =
  "overview" | "events" | "poisoned" | "alerts" | "job-failures" | "webhooks" | "elsewhere" | "none";

const NAV: [Section, string, string][] = [
  ["overview", "/dashboard", "Overview"],
  ["events", "/dashboard/events", "Events"],
  ["poisoned", "/dashboard/poisoned", "Poisoned"],
  ["alerts", "/dashboard/alerts", "Alerts"],
  ["job-failures", "/dashboard/job-failures", "Job failures"],
  ["webhooks", "/dashboard/webhooks", "Webhooks"],
];

/** The query parameter a page's own reload adds: the notice is then not focused again. */
const RELOADED_PARAM = "reloaded";

/**
 * The query parameters an action's redirect adds only for the notice the page shows
 * after it (ADR 0009: fixed texts chosen by numbers and flags), and a page's own
 * reload mark. ENHANCE takes them out of the address once the page is shown: kept,
 * a reload or a bookmark said "Recovered 12 deliveries" again, as if it had happened
 * again. A page that reads one as a filter must not be given its name.
 */
export const ONE_OFF_PARAMS = [
  "requeued",
  "unchanged",
  "nothing",
  "more",
  "track",
  "retried",
  "retriedAll",
  "redelivered",
  "tested",
  "resolved",
  "kind",
  "edited",
  "enabled",
  "disabled",
  "recovered",
  "retrying",
  "signedOut",
  RELOADED_PARAM,
];

/**
 * The only script on any page. Without it every page works; with it, a poisoned
 * group gets a "select all" box, and a table wider than its box (a phone's window)
 * becomes a Tab stop, so the keyboard can scroll it sideways: a table with no link
 * or button in it could not be scrolled without a mouse (axe,
 * scrollable-region-focusable). Only those that overflow, as the page is laid out
 * and on a resize: a stop on every table would be a stop for nothing on a desktop.
 *
 * Escape closes an open confirmation (Confirm) from anywhere inside it. A notice's
 * flags (ONE_OFF_PARAMS) leave the address once the page is shown.
 *
 * A page watched after an action (Refresh.watch) is read again in the background
 * instead of reloaded: a reload every 2 s threw a keyboard user's focus back to the
 * top (a walkthrough's Tab never got past the header while a slow receiver kept a
 * test delivery pending) and made a screen reader start over. Once the page read
 * is no longer watched, its main part replaces this one's, once, and its notice
 * takes the focus, so what settled is said. Served inline with the CSP nonce.
 */
const ENHANCE = `{
  const url = new URL(location.href);
  for (const name of ${JSON.stringify(ONE_OFF_PARAMS)}) url.searchParams.delete(name);
  if (url.href !== location.href) history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}
const enhance = () => {
  for (const label of document.querySelectorAll("label[data-select-all]")) {
    const box = label.querySelector("input");
    label.hidden = false;
    box.addEventListener("change", () => {
      for (const row of box.form.querySelectorAll("input[name=id]")) row.checked = box.checked;
    });
  }
  reachable();
};
const reachable = () => {
  for (const box of document.querySelectorAll(".scroll")) {
    if (box.scrollWidth > box.clientWidth) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", "table, scrolls sideways");
    } else {
      box.removeAttribute("tabindex");
      box.removeAttribute("role");
      box.removeAttribute("aria-label");
    }
  }
};
enhance();
addEventListener("resize", reachable);
// Escape closes an open confirmation, as it closes a dialog, and gives focus back to its button.
addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  const open = event.target instanceof Element ? event.target.closest("details.confirm[open]") : null;
  if (!open) return;
  open.open = false;
  open.querySelector("summary").focus();
});
const watched = document.querySelector("[data-watch]");
if (watched) {
  const [says, link] = watched.children;
  const every = Number(watched.dataset.every) * 1000;
  says.textContent = "Watching: what settles shows here, without a reload. ";
  link.textContent = "Stop watching";
  const stopped = (why) => {
    says.textContent = why + " ";
    link.textContent = "Reload";
  };
  const look = async () => {
    if (!watched.isConnected) return;
    let next;
    try {
      const res = await fetch(watched.dataset.watch, { headers: { accept: "text/html" } });
      if (!res.ok || res.redirected) return stopped("Stopped watching: the page answered " + res.status + (res.redirected ? " (signed out?)." : "."));
      next = new DOMParser().parseFromString(await res.text(), "text/html");
    } catch {
      return stopped("Stopped watching: the Worker did not answer.");
    }
    const nextMain = next.getElementById("main");
    if (!nextMain) return stopped("Stopped watching: the page could not be read.");
    if (next.querySelector("[data-watch]")) return void setTimeout(look, every);
    const main = document.getElementById("main");
    main.replaceChildren(...Array.from(nextMain.childNodes, (node) => document.importNode(node, true)));
    document.title = next.title;
    enhance();
    (document.getElementById("notice") ?? main).focus();
  };
  setTimeout(look, every);
}`;

/**
 * A page that reloads itself (meta refresh: works without script). A reload
 * throws a keyboard user's focus back to the top and makes a screen reader start
 * over (a walkthrough could not reach the overview's tenth Retry by keyboard), so
 * such a page always says so first and offers a link that stops it (WCAG 2.2.1).
 */
export interface Refresh {
  seconds: number;
  /** Where to reload: reloadUrl, or a URL without a one-off notice. */
  url: string;
  /** The same page, not reloading. */
  stop: string;
  /**
   * A page watched until what an action started settles, which the operator did not
   * ask to watch: with script it is read in the background and updated once, when
   * it settles (ENHANCE); the meta refresh is only for a browser without script.
   */
  watch?: boolean;
}

interface PageProps {
  title: string;
  section: Section;
  nonce?: string;
  refresh?: Refresh | undefined;
  children?: Child;
}

function Page({ title, section, nonce, refresh, children }: PageProps) {
  const reload = refresh ? (
    <meta http-equiv="refresh" content={`${refresh.seconds}; url=${refresh.url}`} />
  ) : null;
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        {refresh?.watch ? <noscript>{reload}</noscript> : reload}
        <title>{`${title} · edge-outbox`}</title>
        <link rel="stylesheet" href="/dashboard/assets/dashboard.css" />
        <link rel="icon" href="/dashboard/assets/icon.svg" type="image/svg+xml" />
      </head>
      <body>
        <a class="skip" href="#main">
          Skip to content
        </a>
        {section === "none" ? null : (
          <header class="top">
            <span class="brand">edge-outbox</span>
            <nav aria-label="Sections">
              {NAV.map(([key, href, label]) => (
                <a href={href} aria-current={key === section ? "page" : undefined}>
                  {label}
                </a>
              ))}
            </nav>
            <form method="post" action="/dashboard/logout">
              <button type="submit">Sign out</button>
            </form>
          </header>
        )}
        <main id="main" tabindex={-1}>
          {refresh ? (
            <p
              class="live"
              {...(refresh.watch ? { "data-watch": refresh.url, "data-every": String(refresh.seconds) } : {})}
            >
              <span>{`This page reloads every ${refresh.seconds} s. `}</span>
              <a href={refresh.stop}>Stop reloading</a>
            </p>
          ) : null}
          {children}
        </main>
        {nonce ? <script nonce={nonce}>{rawScript(ENHANCE)}</script> : null}
      </body>
    </html>
  );
}

// JSX would escape the script's quotes and arrows; this text is ours, not input.
function rawScript(text: string) {
  return raw(text);
}

/** Renders a full page with its doctype. */
export async function render(
  c: Context<DashboardEnv>,
  props: Omit<PageProps, "nonce" | "children">,
  body: Child,
  status: 200 | 201 | 400 | 401 | 403 | 404 | 405 | 409 | 413 | 415 | 429 | 500 | 503 = 200,
) {
  const page = (
    <Page {...props} nonce={c.get("secureHeadersNonce")}>
      {body}
    </Page>
  );
  return c.html(`<!doctype html>${await page}`, status);
}

/**
 * The answer to a form sent without a session (it expired, or the operator signed
 * out in another tab): a page, not a line of plain text with no way on, saying that
 * nothing was done and linking to the sign-in, which leads back to the page the form
 * was on (`from`, the Referer's path; the login's own check keeps it a dashboard path).
 */
export function signInAgain(c: Context<DashboardEnv>, from: string | undefined) {
  const next = from ? `?next=${encodeURIComponent(from)}` : "";
  return render(
    c,
    { title: "Signed out", section: "none" },
    <div class="panel">
      <h1>Your session has ended</h1>
      <p class="error" role="alert" {...focusedOnLoad()}>
        Nothing was done: the form was sent without a dashboard session (it lasts 12 hours, and signing out
        ends it).
      </p>
      <p>
        <a href={`/dashboard/login${next}`}>Sign in again</a>, then do it once more.
      </p>
    </div>,
    401,
  );
}

/** A phrase the CLI puts after a semicolon ("while …"), as a sentence of its own on a page. */
export function asSentence(phrase: string): string {
  return `${phrase.charAt(0).toUpperCase()}${phrase.slice(1)}.`;
}

/** `2026-12-03 08:01:36Z`: UTC, to the second, the same in every operator's browser. */
export function time(d: Date | null | undefined): string {
  if (!d) return "–";
  return `${d.toISOString().slice(0, 19).replace("T", " ")}Z`;
}

export function age(seconds: number | null): string {
  if (seconds === null) return "–";
  if (seconds < 90) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172_800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${Math.round(seconds / 86_400)} d`;
}

/**
 * Every table on the dashboard. A table of several columns is wider than a phone
 * or a narrow window, so it scrolls sideways in its own box and the page keeps the
 * window's width (styles.ts); each page once chose for itself, and most did not.
 *
 * `stack`: a list of rows, each with what it says and what can be done to it. In a
 * window narrower than 70rem (an endpoint's deliveries, the widest list, need about
 * 66rem) each row becomes a block of lines, each cell led by its column's name from
 * its `data-label` (the header row is hidden): scrolled sideways, an alert's message
 * and its Resolve button, a delivery's error and its Redeliver sat past the window's
 * edge at 800 px, with nothing showing they were there.
 */
export function Table({
  class: className,
  id,
  stack,
  children,
}: {
  class?: string;
  id?: string;
  stack?: boolean;
  children?: Child;
}) {
  const classes = [className, stack ? "stack" : undefined].filter(Boolean).join(" ");
  return (
    <div class="scroll">
      <table class={classes || undefined} id={id}>
        {children}
      </table>
    </div>
  );
}

/**
 * The links under a keyset-paged list: back to the newest page (on an older one)
 * and to the next older page (when there is one). Each page says where they go.
 */
export function Pager({ newest, older }: { newest?: string | undefined; older?: string | undefined }) {
  // No links, no navigation landmark: an empty one was announced on every first page.
  if (newest === undefined && older === undefined) return null;
  return (
    <nav class="pager" aria-label="Pages">
      {newest !== undefined ? <a href={newest}>« newest</a> : null}
      {older !== undefined ? (
        <a rel="next" href={older}>
          older »
        </a>
      ) : null}
    </nav>
  );
}

/**
 * A link to a UUID shown by its end (after `label`, when given), the whole id on
 * hover: a UUIDv7 begins with its time, the same for a whole burst of rows.
 */
export function IdLink({ href, id, label }: { href: string; id: string; label?: string }) {
  return (
    <a href={href} title={id}>
      {`${label ? `${label} ` : ""}…${id.slice(-12)}`}
    </a>
  );
}

export function StateBadge({ state }: { state: string }) {
  return <span class={`state state-${state}`}>{state}</span>;
}

/**
 * What an action did, on the page it sent the operator back to. Focused when the
 * page loads: after a form's redirect focus started at the top of the page, and a
 * message already there when the page loads is not announced by a screen reader.
 */
export function Notice({ text, focus = true }: { text: string | undefined; focus?: boolean }) {
  return text ? (
    <p class="notice" role="status" {...focusedOnLoad(focus)}>
      {text}
    </p>
  ) : null;
}

/**
 * The attributes of what a page says about the action that led to it (a notice, a
 * requeue's result, an error's message): focused as the page loads, unless `focus`
 * is false (the page's own reload, isReload), and reachable as `#notice`.
 */
export function focusedOnLoad(focus = true) {
  return { id: "notice", tabindex: -1, autofocus: focus };
}

/**
 * This page's URL marked as its own reload: a notice focused on every reload pulled a
 * keyboard user back to it every 2 s (a walkthrough's Tab to Redeliver lasted 2.5 s).
 */
export function reloadUrl(c: Context<DashboardEnv>): string {
  const url = new URL(c.req.url);
  url.searchParams.set(RELOADED_PARAM, "1");
  return url.pathname + url.search;
}

/** Whether this request is a page's own reload (reloadUrl): nothing new to focus. */
export function isReload(c: Context<DashboardEnv>): boolean {
  return c.req.query(RELOADED_PARAM) !== undefined;
}

/**
 * A press that does much at once (re-sends jobs by the thousand, stops an
 * endpoint's deliveries, replaces its secret): the first button only opens a line
 * saying what will happen, and the form's own button, beside it, does it. A
 * walkthrough did each of these with one Enter. No script: a disclosure, opened
 * and closed with Enter or Space.
 */
export function Confirm({
  label,
  says,
  danger,
  children,
}: {
  label: string;
  says: string;
  danger?: boolean;
  children?: Child;
}) {
  return (
    <details class="confirm">
      <summary class={danger ? "btn danger" : "btn secondary"}>{label}</summary>
      <div class="confirm-body">
        <p>{says}</p>
        {children}
      </div>
    </details>
  );
}

/** Words for a screen reader only: a column's or a button's name the eye takes from its place. */
export function Unseen({ children }: { children?: Child }) {
  return <span class="unseen">{children}</span>;
}
