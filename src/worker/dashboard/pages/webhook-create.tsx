import type { Context, Hono } from "hono";
import { EndpointExistsError, createEndpoint, knownScopes } from "../../../domain/webhooks/create.ts";
import { createEndpointInput, type EndpointView } from "../../../domain/webhooks/schemas.ts";
import { ApiError } from "../../errors.ts";
import { plainWords } from "../../validate.ts";
import { endpointFormRefusal, readEndpointForm } from "./endpoint-form.ts";
import { requireSecretsKey, webhookSecretsKey } from "../../webhook-secrets-key.ts";
import type { DashboardEnv } from "../env.ts";
import { focusedOnLoad, render } from "../layout.tsx";

/**
 * Adding a webhook endpoint from the dashboard, as POST /admin/webhooks/endpoints
 * does (the same input rules, URL policy included). Before, the only way was the
 * API: an operator on the Webhooks page had a curl to find (the walkthroughs' note,
 * "endpoints not creatable in the dashboard").
 *
 * The form carries the id the endpoint will have, chosen when the form was shown:
 * its answer is the only page that shows the secret, and reloading that page sends
 * the form again, which then finds the endpoint made and shows no secret, instead
 * of making a second endpoint with a second secret.
 */

/** What the form holds: its fields as typed, or as a refused form sent them. */
export interface NewEndpointValues {
  id: string;
  url: string;
  /** As typed: globs separated by commas or spaces. */
  types: string;
  scope: string;
  description: string;
}

const blank = (): NewEndpointValues => ({
  id: crypto.randomUUID(),
  url: "",
  types: "*",
  scope: "",
  description: "",
});

export function NewEndpointForm({
  values = blank(),
  scopes,
  open = false,
}: {
  values?: NewEndpointValues;
  scopes: string[];
  open?: boolean;
}) {
  return (
    <details class="edit" open={open}>
      <summary>Add an endpoint</summary>
      <form method="post" action="/dashboard/webhooks">
        <input type="hidden" name="id" value={values.id} />
        <label for="new-url">URL</label>
        <input id="new-url" type="url" name="url" value={values.url} required />
        <label for="new-types">event types (globs, separated by commas or spaces)</label>
        <input id="new-types" type="text" name="types" value={values.types} required />
        {/* A scope is fixed once made (it decides whose events the endpoint gets), and an
            endpoint without one gets only the events recorded without one: said here,
            as the list of known scopes is offered. */}
        <label for="new-scope">
          scope: whose events it gets (empty: the events recorded without a scope)
        </label>
        <input id="new-scope" type="text" name="scope" value={values.scope} list="known-scopes" />
        <datalist id="known-scopes">
          {scopes.map((s) => (
            <option value={s} />
          ))}
        </datalist>
        <label for="new-description">description</label>
        <textarea id="new-description" name="description" rows={3} maxlength={500}>
          {values.description}
        </textarea>
        <button class="btn" type="submit">
          Add endpoint
        </button>
      </form>
    </details>
  );
}

function createdPage(c: Context<DashboardEnv>, endpoint: EndpointView, secret: string) {
  return render(
    c,
    { title: "Endpoint added", section: "webhooks" },
    <div class="panel">
      <h1>Endpoint added</h1>
      <p>
        <span class="mono">{endpoint.url}</span>
        {` gets the events of types ${endpoint.types.join(", ")}, ${
          endpoint.scope === null ? "recorded without a scope" : `of scope ${endpoint.scope}`
        }, from now on. Below is its signing secret: the receiver verifies each webhook with it (Standard Webhooks). Copy it now: it is not shown again.`}
      </p>
      {/* Focused, as a rotation's new secret is (webhooks.tsx). */}
      <pre id="secret" tabindex={0} autofocus>
        {secret}
      </pre>
      <p>
        <a href={`/dashboard/webhooks/${endpoint.id}`}>Go to the endpoint</a>
        {" (send it a test event from there)"}
      </p>
    </div>,
    201,
  );
}

function notAddedPage(
  c: Context<DashboardEnv>,
  values: NewEndpointValues,
  scopes: string[],
  why: string,
  status: 400,
) {
  return render(
    c,
    { title: "Endpoint not added", section: "webhooks" },
    <div class="panel">
      <h1>Endpoint not added</h1>
      <p class="error" role="alert" {...focusedOnLoad()}>
        {why}
      </p>
      <NewEndpointForm values={values} scopes={scopes} open />
      <p>
        <a href="/dashboard/webhooks">Back to the endpoints</a>
      </p>
    </div>,
    status,
  );
}

/** The form sent again (a reload of the secret's page): nothing made, no secret shown. */
function alreadyAddedPage(c: Context<DashboardEnv>, id: string) {
  return render(
    c,
    { title: "Endpoint already added", section: "webhooks" },
    <div class="panel">
      <h1>Endpoint already added</h1>
      <p class="alert-box" role="alert">
        {"This form was sent before and made its endpoint then; nothing was added now, and its secret, "}
        {"shown once then, is not shown again. If it was not copied, rotate it on the endpoint's page."}
      </p>
      <p>
        <a href={`/dashboard/webhooks/${id}`}>Go to the endpoint</a>
      </p>
    </div>,
    409,
  );
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function registerWebhookCreate(dashboard: Hono<DashboardEnv>) {
  dashboard.post("/webhooks", requireSecretsKey, async (c) => {
    const { text, types, globs, description } = await readEndpointForm(c);
    const id = text("id") ?? "";
    if (!UUID.test(id))
      throw new ApiError(
        "BAD_REQUEST",
        "endpoint not added: the form carries no id; add it from the Webhooks page",
      );
    const scope = text("scope")?.trim();
    const input = { url: text("url"), types: globs, scope: scope ? scope : null, description };
    const policy = { allowPrivate: c.var.config.WEBHOOK_ALLOW_PRIVATE_URLS };
    const parsed = createEndpointInput(policy).safeParse(input, { error: plainWords("form") });
    if (!parsed.success) {
      const sent = {
        id,
        url: input.url ?? "",
        types: types ?? "",
        scope: scope ?? "",
        description: input.description ?? "",
      };
      const why = endpointFormRefusal("endpoint not added", parsed.error, input);
      return notAddedPage(c, sent, await knownScopes(c.var.db), why, 400);
    }
    try {
      const { endpoint, secret } = await createEndpoint(
        c.var.db,
        await webhookSecretsKey(c.var.config),
        parsed.data,
        policy,
        { id },
      );
      return createdPage(c, endpoint, secret);
    } catch (error) {
      if (error instanceof EndpointExistsError) return alreadyAddedPage(c, id);
      throw error;
    }
  });
}
