import type { Context, Hono } from "hono";
import { timingSafeEqual } from "hono/utils/buffer";
import type { DashboardEnv } from "./env.ts";
import { render, time } from "./layout.tsx";
import {
  attemptLogin,
  clientAddress,
  localLockoutHint,
  LOCKOUT_POLICY,
  retryAfterSeconds,
} from "./lockout.ts";
import { endSession, hasSession, startSession } from "./session.ts";

/**
 * Only a dashboard path may follow a login: anything else would make the form an open
 * redirect. Printable ASCII only: a CR or LF (`next=/dashboard%0d%0a…`) reached the
 * Location header, which refused it with a 500, after the session cookie was set.
 */
export function safeNext(next: string | undefined): string {
  if (!next || !/^\/dashboard(?:[/?#][\x21-\x7e]*)?$/.test(next) || next.includes("\\")) {
    return "/dashboard";
  }
  return next;
}

function LoginForm({ next, message, signedOut }: { next: string; message?: string; signedOut?: boolean }) {
  return (
    <form class="login" method="post" action="/dashboard/login">
      <h1>edge-outbox operators</h1>
      {/* A fixed text chosen by a flag: a link must not put words on this page. */}
      {signedOut && !message ? (
        <p class="notice" role="status">
          Signed out.
        </p>
      ) : null}
      {message ? (
        <p class="alert-box" role="alert" id="login-error">
          {message}
        </p>
      ) : null}
      <label for="password">Password (the Worker's ADMIN_TOKEN)</label>
      {/* The refusal is the field's description: focus lands here, and a screen reader
          reads it with the field (a role=alert present at load is not reliably read). */}
      <input
        id="password"
        name="password"
        type="password"
        autocomplete="current-password"
        required
        autofocus
        aria-invalid={message ? "true" : undefined}
        aria-describedby={message ? "login-error" : undefined}
      />
      <input type="hidden" name="next" value={next} />
      <button class="btn" type="submit">
        Sign in
      </button>
    </form>
  );
}

function loginPage(
  c: Context<DashboardEnv>,
  next: string,
  message?: string,
  status: 200 | 401 | 429 = 200,
  signedOut = false,
) {
  return render(
    c,
    { title: "Sign in", section: "none" },
    <LoginForm next={next} message={message} signedOut={signedOut} />,
    status,
  );
}

/** Said with every wrong password, so the lock-out after the fifth is no surprise. */
const WRONG_PASSWORD =
  `Wrong password. After ${LOCKOUT_POLICY.maxFailures} wrong ones from your address within ` +
  `${LOCKOUT_POLICY.windowMs / 60_000} minutes, sign-in is refused for ${LOCKOUT_POLICY.lockMs / 60_000} minutes.`;

export function registerLogin(dashboard: Hono<DashboardEnv>) {
  dashboard.get("/login", async (c) => {
    const next = safeNext(c.req.query("next"));
    if (await hasSession(c)) return c.redirect(next, 303);
    return loginPage(c, next, undefined, 200, c.req.query("signedOut") !== undefined);
  });

  dashboard.post("/login", async (c) => {
    const form = await c.req.parseBody();
    const password = typeof form.password === "string" ? form.password : "";
    const next = safeNext(typeof form.next === "string" ? form.next : undefined);
    const outcome = await attemptLogin(
      c.var.pool,
      clientAddress(c.req.header.bind(c.req), c.var.config.PUBLIC_URL),
      () =>
        // Hashes both sides before comparing, so neither content nor length leaks through timing.
        timingSafeEqual(password, c.var.config.ADMIN_TOKEN),
    );
    if (outcome.ok) {
      await startSession(c);
      return c.redirect(next, 303);
    }
    if (outcome.lockedUntil) {
      c.header("Retry-After", String(retryAfterSeconds(outcome.lockedUntil)));
      return loginPage(
        c,
        next,
        `Too many wrong passwords from your address. Try again after ${time(outcome.lockedUntil)}.` +
          localLockoutHint(c.var.config.PUBLIC_URL),
        429,
      );
    }
    return loginPage(c, next, WRONG_PASSWORD, 401);
  });

  dashboard.post("/logout", (c) => {
    endSession(c);
    // Said on the sign-in page: it showed the form alone, as if the session had expired.
    return c.redirect("/dashboard/login?signedOut=1", 303);
  });
}
