import { cliExports, exportLine } from "./dev-vars.ts";

export interface DevBannerParts {
  /** The Worker's URL, as wrangler dev serves it. */
  publicUrl: string;
  /** The cron sweep's period, 0 for off, and the schedule the curl names. */
  sweepSeconds: number;
  cron: string;
  /** The Postgres the stack uses, as migrations and the CLI reach it (not pooled). */
  databaseUrl: string;
  /** Whether that is the user's own DATABASE_URL rather than the embedded server's. */
  databaseUrlGiven: boolean;
  proxyUrl: string;
  pooledUrl: string;
  qstashUrl: string;
  sinkUrl: string;
  apiKeyScope: string;
  apiKey: string;
  /** Whether ADMIN_TOKEN came from the environment rather than .dev/secrets.json. */
  adminTokenGiven: boolean;
  /** The Worker's bindings (.dev.vars). */
  vars: Record<string, string>;
}

/** What `npm run dev` prints once the Worker answers. */
export function devBanner(p: DevBannerParts): string {
  const { publicUrl, sinkUrl, vars } = p;
  const cliDatabaseUrl = p.databaseUrlGiven ? "<your DATABASE_URL>" : p.databaseUrl;
  // The user's own DATABASE_URL may hold a real password, and they have it already. The
  // embedded server's is a local one the CLI lines below print in full anyway: masked,
  // the line was copied and refused (28P01).
  const postgres = p.databaseUrlGiven
    ? `${redact(p.databaseUrl)}   (your DATABASE_URL, password hidden)`
    : p.databaseUrl;
  return `
edge-outbox is running — Ctrl-C stops everything.

  Worker         ${publicUrl}   (cron sweep ${p.sweepSeconds > 0 ? `every ${p.sweepSeconds} s` : "off"}; now: curl '${publicUrl}/__scheduled?cron=${p.cron.replace(/ /g, "+")}')
  dashboard      ${publicUrl}/dashboard   (password: ADMIN_TOKEN, in the export line below; ${p.adminTokenGiven ? "yours, from the environment" : "kept in .dev/secrets.json"})
  Postgres       ${postgres}
  ws proxy       ${p.proxyUrl}   (pooled: ${redact(p.pooledUrl)})
  QStash (dev)   ${p.qstashUrl}
  mail sink      ${sinkUrl}   (what it received: ${sinkUrl}/__received)

  API key (scope "${p.apiKeyScope}", for the domain routes) and ADMIN_TOKEN (for /admin/… and the dashboard):
    export EO_KEY='${p.apiKey}'
${exportLine([["ADMIN_TOKEN", vars.ADMIN_TOKEN!]], "    ")}

  Try:
    curl -s -X POST ${publicUrl}/notes -H "Authorization: Bearer $EO_KEY" \\
      -H 'content-type: application/json' -H 'Prefer: wait=5' \\
      -d '{"title":"Hello outbox","body":"first note"}'
    curl -s '${publicUrl}/notes/search?q=hello' -H "Authorization: Bearer $EO_KEY"
    curl -s ${publicUrl}/admin/stats -H 'Authorization: Bearer ${vars.ADMIN_TOKEN}'

  Add a webhook endpoint that points at the sink (the answer holds its secret, shown once;
  or add it on the dashboard's Webhooks page, URL ${sinkUrl}/webhooks, scope ${p.apiKeyScope}):
    curl -s -X POST ${publicUrl}/admin/webhooks/endpoints -H 'Authorization: Bearer ${vars.ADMIN_TOKEN}' \\
      -H 'content-type: application/json' -d '{"url":"${sinkUrl}/webhooks","types":["*"],"scope":"${p.apiKeyScope}"}'
    curl -s ${sinkUrl}/__received      # what the sink got, with the webhook-* headers

  Operator CLI in another terminal (relay commands, job-failure retries and webhook
  re-sends publish to this stack's QStash, so they need its variables too):
    DATABASE_URL='${cliDatabaseUrl}' npm run outbox -- events list
${exportLine(cliExports(vars, cliDatabaseUrl), "    ")}
    npm run outbox -- relay drain
    npm run outbox -- job-failures retry --all
    npm run outbox -- webhooks list
`;
}

export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}
