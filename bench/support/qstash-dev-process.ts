/**
 * The QStash dev server (infra/qstash-dev, merged from branch qstash-dev) in its own
 * process, as QStash is its own service: its CPU is not the relay's. Delivery is
 * paused, so the benchmark measures what the relay waits for — the batch publish
 * being accepted — and not deliveries that QStash would make from its own servers.
 * Prints `{url, token}` as one JSON line; exits when stdin closes or on SIGTERM.
 */
import { startQStashDev } from "../../infra/qstash-dev/server.ts";

const dev = await startQStashDev({ port: 0 });
dev.pauseDelivery();
process.stdout.write(`${JSON.stringify({ url: dev.url, token: dev.token })}\n`);

const stop = () => void dev.close().then(() => process.exit(0));
process.stdin.on("end", stop);
process.stdin.resume();
process.on("SIGTERM", stop);
