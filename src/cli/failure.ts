const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ECONNRESET",
  "EAI_AGAIN",
]);

/** One line an operator can act on, instead of a stack trace. */
export function describeFailure(error: unknown): string {
  const e = error as { code?: string; message?: string; errors?: { code?: string }[] };
  const code = e.code ?? e.errors?.[0]?.code;
  if (code && CONNECTION_CODES.has(code)) {
    return `cannot reach the database (${code}): check DATABASE_URL and that Postgres is running`;
  }
  if (code === "28P01" || code === "28000")
    return `the database refused the credentials in DATABASE_URL (${code})`;
  if (code === "3D000") return `the database in DATABASE_URL does not exist (${e.message})`;
  if (code === "42P01")
    return `the outbox tables are missing: run \`npm run outbox -- migrate\` (${e.message})`;
  if (/timeout exceeded when trying to connect/i.test(e.message ?? "")) {
    return "cannot reach the database (timed out): check DATABASE_URL and that Postgres is running";
  }
  return e.message ?? String(error);
}
