import { webhookDeliveryStatuses, type WebhookDeliveryStatus } from "../domain/schema.ts";
import { getDelivery, listDeliveries } from "../domain/webhooks/deliveries.ts";
import { notQueuedMessage } from "../domain/webhooks/deliver-queue.ts";
import { endpointHealth } from "../domain/webhooks/delivery-log.ts";
import { findEndpointRow, getEndpoint } from "../domain/webhooks/get.ts";
import { recoverDeliveries, recoveredText, recoverSince } from "../domain/webhooks/recover.ts";
import { redeliver } from "../domain/webhooks/redeliver.ts";
import { sendTestEvent } from "../domain/webhooks/send-test.ts";
import { PAGE_LIMIT_MAX } from "../domain/webhooks/schemas.ts";
import { updateEndpoint } from "../domain/webhooks/update.ts";
import { deliverQueueFor } from "../worker/webhooks.ts";
import { idArgument, intOption, refusedUnpublished, UsageError } from "./args.ts";
import { dbOf, type Command, type CommandIo } from "./command.ts";
import { readVariables, webhookPublishVariables } from "./config.ts";
import { formatDelivery, formatEndpoint, formatEndpointTable } from "./format.ts";

/** The one id a sub-command takes, or a usage error saying so. */
function oneId(rest: string[], sub: string, what: string): string {
  const [id] = rest;
  if (!id || rest.length > 1) throw new UsageError(`webhooks ${sub} takes one ${what} id`);
  return idArgument(id, `a ${what}`, "uuid");
}

/** A re-send QStash did not take: a refusal saying nothing changed for `what` (notQueuedMessage). */
const notQueued = (what: string) =>
  refusedUnpublished((error, advice) => notQueuedMessage(what, error, advice));

/**
 * `webhooks list|show|delivery|redeliver|recover|test|enable|disable`: what the
 * dashboard's webhook pages show and do, from a terminal, through the same use
 * cases as the admin routes. Re-sending publishes a deliver job to the Worker's
 * `/jobs/webhook.deliver`, so it needs the QStash variables the Worker has.
 */
export const webhooksCommand: Command = ({ options, sub, rest }) => {
  if (sub === "list") {
    if (rest.length > 0) throw new UsageError(`webhooks list takes no argument, got "${rest[0]}"`);
    return async (io) => {
      // The edit form's digest is the dashboard's, not an operator's to read.
      const endpoints = (await endpointHealth(dbOf(io.pool))).map(({ version: _, ...e }) => e);
      io.print(endpoints, () => formatEndpointTable(endpoints));
      return 0;
    };
  }
  if (sub === "show") {
    const id = oneId(rest, sub, "webhook endpoint");
    const status = options.status;
    if (status !== undefined && !isDeliveryStatus(status))
      throw new UsageError(`--status must be pending, delivered or failed, got "${status}"`);
    const limit = intOption(options.limit, "--limit", 20, PAGE_LIMIT_MAX);
    return async (io) => {
      const db = dbOf(io.pool);
      const { endpoint, health } = await getEndpoint(db, id);
      const page = await listDeliveries(db, id, { limit, ...(status ? { status } : {}) });
      const shown = { endpoint, health, deliveries: page.deliveries, more: page.nextCursor !== null };
      io.print(shown, () => formatEndpoint(shown, status));
      return 0;
    };
  }
  if (sub === "delivery") {
    const id = oneId(rest, sub, "webhook delivery");
    return async (io) => {
      const db = dbOf(io.pool);
      const { delivery } = await getDelivery(db, id);
      const { url } = await findEndpointRow(db, delivery.endpointId);
      const shown = { ...delivery, endpointUrl: url };
      io.print(shown, () => formatDelivery(shown));
      return 0;
    };
  }
  if (sub === "redeliver") {
    const id = oneId(rest, sub, "webhook delivery");
    return async (io) => {
      const queue = deliverQueueFor(readVariables(webhookPublishVariables));
      const queued = await redeliver(dbOf(io.pool), queue, id).catch(notQueued(`delivery ${id}`));
      io.print(queued, () => `delivery ${id}: a new deliver job is queued (same body and webhook-id)`);
      return 0;
    };
  }
  if (sub === "recover") {
    const id = oneId(rest, sub, "webhook endpoint");
    if (options.since === undefined)
      throw new UsageError(
        "webhooks recover needs --since <time>: an ISO 8601 time, e.g. 2026-12-05T00:00:00Z",
      );
    const parsed = recoverSince.safeParse(options.since);
    if (!parsed.success)
      throw new UsageError(
        `--since must be an ISO 8601 time with its offset, e.g. 2026-12-05T00:00:00Z, got "${options.since}"`,
      );
    const since = new Date(parsed.data);
    return async (io) => recoverAll(io, id, since);
  }
  if (sub === "test") {
    const id = oneId(rest, sub, "webhook endpoint");
    return async (io) => {
      const queue = deliverQueueFor(readVariables(webhookPublishVariables));
      const sent = await sendTestEvent(dbOf(io.pool), queue, id).catch(notQueued(`webhook endpoint ${id}`));
      io.print(
        sent,
        () =>
          `webhook.test queued for webhook endpoint ${id} as delivery ${sent.deliveryId}; ` +
          `its attempts: npm run outbox -- webhooks delivery ${sent.deliveryId}`,
      );
      return 0;
    };
  }
  if (sub === "enable" || sub === "disable") {
    const id = oneId(rest, sub, "webhook endpoint");
    return async (io) => {
      const db = dbOf(io.pool);
      // Read first only to say "already": the update decides, and keeps the first reason.
      const before = await findEndpointRow(db, id);
      // Only `enabled` changes, so no URL is checked and the policy is never read.
      const endpoint = await updateEndpoint(db, id, { enabled: sub === "enable" }, { allowPrivate: false });
      const already = before.enabled === endpoint.enabled ? "already " : "";
      io.print(endpoint, () =>
        endpoint.enabled
          ? `webhook endpoint ${id} is ${already}enabled; its failed deliveries stay failed: webhooks recover ${id} --since <time>` +
            // The events of the gap are skipped for good: an operator who followed the
            // recovery believed the receiver complete (the outage walkthrough).
            (already ? "" : "; events recorded while it was disabled made no delivery for it")
          : // Its queued jobs fail, not wait: an operator who meant to pause it must know.
            `webhook endpoint ${id} is ${already}disabled (${endpoint.disabledReason}); it gets no new deliveries, ` +
            `and those pending fail without a request (once enabled, webhooks recover ${id} sends them again)`,
      );
      return 0;
    };
  }
  throw new UsageError(
    sub === undefined
      ? "webhooks needs a command: list, show, delivery, redeliver, recover, test, enable or disable"
      : `unknown webhooks command "${sub}" (list, show, delivery, redeliver, recover, test, enable, disable)`,
  );
};

function isDeliveryStatus(s: string): s is WebhookDeliveryStatus {
  return (webhookDeliveryStatuses as readonly string[]).includes(s);
}

/**
 * Every delivery of the endpoint created since then that gave up or waits for a
 * retry, a batch (RECOVER_BATCH) per publish, with a line per batch on stderr so a
 * long recovery shows progress. A batch QStash refuses is put back as it was; the
 * ones before it stay re-sent.
 */
async function recoverAll(io: CommandIo, id: string, since: Date): Promise<number> {
  const queue = deliverQueueFor(readVariables(webhookPublishVariables));
  const db = dbOf(io.pool);
  let recovered = 0;
  let retrying = 0;
  for (;;) {
    const round = await recoverDeliveries(db, queue, id, since).catch(
      notQueued(`the deliveries not yet re-sent (${recovered} were re-sent before this)`),
    );
    recovered += round.recovered;
    retrying += round.retrying;
    if (!round.more) break;
    console.error(`re-sent ${recovered} so far…`);
  }
  io.print({ recovered, retrying }, () =>
    recovered === 0
      ? `no delivery of webhook endpoint ${id} created since ${since.toISOString()} gave up or waits for a retry`
      : `re-sent ${recoveredText(recovered, retrying)} of webhook endpoint ${id}`,
  );
  return 0;
}
