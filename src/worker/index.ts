// The Worker's entry point: HTTP routes (`fetch`) and the cron sweep (`scheduled`).
import { createApp } from "./app.ts";
import type { Bindings } from "./env.ts";
import { createScheduled } from "./scheduled.ts";

const app = createApp();

export default {
  fetch: app.fetch,
  scheduled: createScheduled(),
} satisfies ExportedHandler<Bindings>;
