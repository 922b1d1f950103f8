import { and, eq, getTableColumns, sql, type SQL } from "drizzle-orm";
import type { PgUpdateSetSource } from "drizzle-orm/pg-core";
import type { Db } from "../db.ts";
import { DomainError, NotFoundError } from "../errors.ts";
import { webhookEndpoints } from "../schema.ts";
import { resolveEndpointAlerts } from "./endpoint-state.ts";
import { endpointView, updateEndpointInput, type EndpointView, type UpdateEndpointInput } from "./schemas.ts";
import type { UrlPolicy } from "./url-safety.ts";

/** Why an endpoint is disabled when an operator, not the delivery engine, turned it off. */
export const DISABLED_BY_OPERATOR = "disabled by an operator";

/** A digest of the values given, one per line: none can hold a newline but the description, which goes last. */
const digestOf = (...values: SQL[]) =>
  sql<string>`encode(sha256(convert_to(${sql.join(values, sql` || E'\n' || `)}, 'UTF8')), 'hex')`;
const typesText = sql`array_to_string(${webhookEndpoints.types}, E'\n')`;

/**
 * A digest of the fields an edit form shows (url, types, description), read with
 * the form and compared when it is saved: a form saved over someone else's change
 * since would undo it unseen. An enable or disable since is not such a change: the
 * form does not carry `enabled`, so saving it leaves that as it is.
 */
export const editVersion = digestOf(
  sql`${webhookEndpoints.url}`,
  typesText,
  sql`${webhookEndpoints.description}`,
);

/**
 * The API's ETag: editVersion's fields and `enabled`, all a PATCH can set. A script
 * that read the endpoint before another disabled it would turn it back on unseen.
 */
export const endpointEtag = digestOf(
  sql`${webhookEndpoints.url}`,
  typesText,
  sql`${webhookEndpoints.enabled}::text`,
  sql`${webhookEndpoints.description}`,
);

/** An edit saved from a form whose endpoint changed since the form was shown. */
export class EndpointChangedError extends DomainError {
  constructor(id: string) {
    super(
      "illegal_transition",
      `webhook endpoint ${id} was changed since this form was shown; nothing was saved: reload the page and edit again`,
    );
  }
}

/**
 * Changes url, types, description or enabled; never the scope (see schemas.ts).
 * With `ifVersion` (an editVersion read with a form), only if those fields are
 * still what the form showed; otherwise EndpointChangedError and nothing changes.
 * Turning an endpoint off records a reason (the table requires one); turning it
 * back on forgets the reason and the failure streak, so the auto-disable sweep
 * measures the endpoint afresh instead of disabling it again at once, and resolves
 * the `webhook.endpoint_disabled` alert, which it answers (in one transaction).
 */
export async function updateEndpoint(
  db: Db,
  id: string,
  input: UpdateEndpointInput,
  policy: UrlPolicy,
  options: { ifVersion?: string } = {},
): Promise<EndpointView> {
  return (await updateEndpointVersioned(db, id, input, policy, options)).endpoint;
}

/** updateEndpoint, also only if `ifEtag` is still its endpointEtag; with its endpointEtag after. */
export async function updateEndpointVersioned(
  db: Db,
  id: string,
  input: UpdateEndpointInput,
  policy: UrlPolicy,
  options: { ifVersion?: string; ifEtag?: string } = {},
): Promise<{ endpoint: EndpointView; etag: string }> {
  const patch = updateEndpointInput(policy).parse(input);
  const t = webhookEndpoints;
  // updatedAt moves only when a value does (as a note's does): a PATCH that names
  // what the endpoint already has is a no-op, and said it had changed.
  const changes = [
    patch.url === undefined ? undefined : sql`${t.url} IS DISTINCT FROM ${patch.url}`,
    patch.types === undefined
      ? undefined
      : sql`${t.types} IS DISTINCT FROM ARRAY[${sql.join(
          patch.types.map((type) => sql`${type}`),
          sql`, `,
        )}]::text[]`,
    patch.description === undefined ? undefined : sql`${t.description} IS DISTINCT FROM ${patch.description}`,
    patch.enabled === undefined ? undefined : sql`${t.enabled} IS DISTINCT FROM ${patch.enabled}`,
  ].filter((c) => c !== undefined);
  const changed = changes.length === 0 ? sql`false` : sql.join(changes, sql` OR `);
  const set: PgUpdateSetSource<typeof t> = {
    updatedAt: sql`CASE WHEN ${changed} THEN now() ELSE ${t.updatedAt} END`,
  };
  if (patch.url !== undefined) set.url = patch.url;
  if (patch.types !== undefined) set.types = patch.types;
  if (patch.description !== undefined) set.description = patch.description;
  if (patch.enabled === true) {
    // Only an endpoint that was off changes state; re-enabling an enabled one
    // must not wipe the failing streak the delivery engine is tracking.
    set.enabled = true;
    set.disabledReason = sql`CASE WHEN ${t.enabled} THEN ${t.disabledReason} ELSE NULL END`;
    set.disabledAt = sql`CASE WHEN ${t.enabled} THEN ${t.disabledAt} ELSE NULL END`;
    set.failingSince = sql`CASE WHEN ${t.enabled} THEN ${t.failingSince} ELSE NULL END`;
  } else if (patch.enabled === false) {
    // Disabling a disabled endpoint keeps the first reason (e.g. "410 Gone").
    set.enabled = false;
    set.disabledReason = sql`CASE WHEN ${t.enabled} THEN ${DISABLED_BY_OPERATOR} ELSE ${t.disabledReason} END`;
    set.disabledAt = sql`CASE WHEN ${t.enabled} THEN now() ELSE ${t.disabledAt} END`;
  }
  const unchanged = and(
    options.ifVersion === undefined ? undefined : sql`${editVersion} = ${options.ifVersion}`,
    options.ifEtag === undefined ? undefined : sql`${endpointEtag} = ${options.ifEtag}`,
  );
  const write = async (tx: Db) => {
    const [row] = await tx
      .update(t)
      .set(set)
      .where(and(eq(t.id, id), unchanged))
      .returning({ ...getTableColumns(t), etag: endpointEtag });
    if (!row) {
      if (unchanged) {
        const [exists] = await tx.select({ id: t.id }).from(t).where(eq(t.id, id));
        if (exists) throw new EndpointChangedError(id);
      }
      throw new NotFoundError("webhook endpoint", id);
    }
    if (patch.enabled === true)
      await resolveEndpointAlerts(tx, id, ["webhook.endpoint_disabled"], "the endpoint was enabled again");
    return { endpoint: endpointView(row), etag: row.etag };
  };
  return patch.enabled === true ? db.transaction((tx) => write(tx)) : write(db);
}
