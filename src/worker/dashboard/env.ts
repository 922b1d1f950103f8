import type { SecureHeadersVariables } from "hono/secure-headers";
import type { Bindings, Variables } from "../env.ts";

/** The Worker's environment plus what the dashboard's own middleware sets (the CSP nonce). */
export type DashboardEnv = { Bindings: Bindings; Variables: Variables & SecureHeadersVariables };
