import type { SecureHeadersVariables } from "hono/secure-headers";
import type { Bindings, Variables } from "../env.ts";

/**
 * The Worker's environment plus what the dashboard's own middleware sets: the CSP
 * nonce, and `signedIn` once requireSession has seen a session (an error page then
 * keeps the header's links).
 */
export type DashboardEnv = {
  Bindings: Bindings;
  Variables: Variables & SecureHeadersVariables & { signedIn?: boolean };
};
