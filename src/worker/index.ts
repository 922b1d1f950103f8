// The Worker's entry point. `scheduled` (the cron sweep) joins `fetch` here once
// the relay core is available.
import { createApp } from "./app.ts";
import type { Bindings } from "./env.ts";

const app = createApp();

export default {
  fetch: app.fetch,
} satisfies ExportedHandler<Bindings>;
