/**
 * `npm run qstash:dev`: a local QStash on QSTASH_DEV_PORT (default 8080, the port
 * Upstash's own dev server uses), with QSTASH_TOKEN / QSTASH_CURRENT_SIGNING_KEY /
 * QSTASH_NEXT_SIGNING_KEY taken from the environment or generated.
 * Optional: QSTASH_DEV_HOST (default 127.0.0.1), QSTASH_DEV_TIME_SCALE (e.g. 0.01 to
 * compress delays and retry backoff), QSTASH_DEV_SIGN_WITH_NEXT_KEY=true (key rotation),
 * QSTASH_DEV_STATE_FILE (keep the queue in that file across restarts; unset, in memory).
 */
import { DEV_KEEP_SETTLED, restoredText, startQStashDev, timeScaleFrom } from "./server.ts";

const env = process.env;
const port = env.QSTASH_DEV_PORT ? Number(env.QSTASH_DEV_PORT) : 8080;
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`QSTASH_DEV_PORT must be a port number, got ${JSON.stringify(env.QSTASH_DEV_PORT)}`);
  process.exit(1);
}

let timeScale: number;
try {
  timeScale = timeScaleFrom(env.QSTASH_DEV_TIME_SCALE);
} catch (error) {
  console.error((error as Error).message);
  process.exit(1);
}

const dev = await startQStashDev({
  timeScale,
  signWithNextKey: env.QSTASH_DEV_SIGN_WITH_NEXT_KEY === "true",
  port,
  host: env.QSTASH_DEV_HOST ?? "127.0.0.1",
  token: env.QSTASH_TOKEN || undefined,
  currentSigningKey: env.QSTASH_CURRENT_SIGNING_KEY || undefined,
  nextSigningKey: env.QSTASH_NEXT_SIGNING_KEY || undefined,
  stateFile: env.QSTASH_DEV_STATE_FILE || undefined,
  // A server left running would otherwise keep every message it ever delivered.
  keepSettled: DEV_KEEP_SETTLED,
  log: (line) => console.log(line),
}).catch((error: unknown) => {
  // Typically EADDRINUSE: say so plainly instead of dumping an unhandled rejection.
  console.error(`qstash-dev could not start: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});

console.log(`qstash-dev listening on ${dev.url}
  QSTASH_URL=${dev.url}
  QSTASH_TOKEN=${dev.token}
  QSTASH_CURRENT_SIGNING_KEY=${dev.currentSigningKey}
  QSTASH_NEXT_SIGNING_KEY=${dev.nextSigningKey}
  time scale ${timeScale}${env.QSTASH_DEV_SIGN_WITH_NEXT_KEY === "true" ? ", signing with the NEXT key" : ""}
  ${env.QSTASH_DEV_STATE_FILE ? `queue kept in ${env.QSTASH_DEV_STATE_FILE}: ${restoredText(dev.restored)}` : "queue in memory only (QSTASH_DEV_STATE_FILE keeps it across restarts)"}
Use: new Client({ baseUrl: QSTASH_URL, token: QSTASH_TOKEN, devMode: false })`);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void dev.close().then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
