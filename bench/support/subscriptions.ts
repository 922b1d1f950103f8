import { defineSubscriptions } from "../../src/outbox/index.ts";

/**
 * Two subscriptions match every event, one of them coalescing: the shape issue 5
 * asks for (like `notify.mail` and `corpus.index` in the reference app).
 */
export const benchSubscriptions = defineSubscriptions([
  { name: "mail", types: ["*"] },
  { name: "index", types: ["*"], coalesce: true },
]);

/** Jobs go here; the dev server's delivery is paused, so nothing ever calls it. */
export const PUBLIC_URL = "http://127.0.0.1:9/never-called";
