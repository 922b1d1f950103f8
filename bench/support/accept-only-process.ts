/**
 * infra/qstash-accept-only.ts in its own process, as QStash is its own service:
 * argv[2] is the delay per request in ms. Answers `stats` and `reset` (see service.ts).
 */
import { startAcceptOnlyQStash } from "../../infra/qstash-accept-only.ts";
import { serveCommands } from "./service.ts";

const qstash = await startAcceptOnlyQStash({ delayMs: Number(process.argv[2] ?? 0) });
serveCommands(
  { url: qstash.url, token: qstash.token },
  { stats: () => qstash.stats(), reset: () => qstash.reset() },
  () => qstash.close(),
);
