import { createHmac } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { signJwt } from "../../infra/qstash-dev/signing.ts";
import type { Bindings } from "../../src/worker/env.ts";
import { useTestDatabase } from "../support/db.ts";
import { appOverTestDatabase, bindings, call } from "../support/worker.ts";

// Odd but correctly signed input on the job routes: QStash retries every 5xx, so
// an answer to input must be 2xx or 489, never 500.
const t = useTestDatabase();
const app = appOverTestDatabase(t);
let env: Bindings;
beforeAll(() => {
  env = bindings({ DATABASE_URL: t.url });
});

const sign = (path: string, body: string) =>
  signJwt({ key: env.QSTASH_CURRENT_SIGNING_KEY!, url: `${env.PUBLIC_URL}${path}`, body: Buffer.from(body) });
const deliver = (path: string, body: string, signature = sign(path, body)) =>
  call(app, env, "POST", path, body, { headers: { "upstash-signature": signature } });
const b64 = (s: string) => Buffer.from(s).toString("base64");

function callback(fields: Record<string, unknown>) {
  return JSON.stringify({
    status: 500,
    body: b64("down"),
    retried: 3,
    sourceMessageId: `msg_${Math.random().toString(36).slice(2)}`,
    url: `${env.PUBLIC_URL}/jobs/notify.mail`,
    sourceBody: b64(JSON.stringify({ subscription: "notify.mail", event: { id: "x" } })),
    ...fields,
  });
}

describe("/jobs/_failed records odd but signed input, cleaned, never a 500", () => {
  const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
    [
      "a malformed URL escape",
      { url: `${"http://127.0.0.1:8787"}/jobs/%E0%A4%A` },
      { subscription: "%E0%A4%A" },
    ],
    ["an out-of-range status", { status: 99_999_999_999 }, { status: null }],
    ["an out-of-range retry count", { retried: 2 ** 40 }, {}],
    ["NUL in the source body", { sourceBody: b64('{"a":"\u0000"}') }, { body: '{"a":"\uFFFD"}' }],
    ["NUL in the response body", { body: b64("bad\u0000answer") }, { responseBody: "bad\uFFFDanswer" }],
    ["NUL in the message id", { sourceMessageId: "msg_\u0000x" }, { messageId: "msg_\uFFFDx" }],
  ];
  it.each(cases)("%s", async (_what, fields, recorded) => {
    const body = callback(fields);
    const res = await deliver("/jobs/_failed", body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, recorded: true });
    const { rows } = await t.pool.query(
      `SELECT message_id AS "messageId", subscription, status, body, response_body AS "responseBody"
         FROM job_failures ORDER BY id DESC LIMIT 1`,
    );
    expect(rows[0]).toMatchObject(recorded);
  });

  it("a body that is not QStash's callback shape is a 489, not a 500", async () => {
    for (const body of ["not json", JSON.stringify({ url: 7 }), JSON.stringify({ sourceMessageId: "" })]) {
      const res = await deliver("/jobs/_failed", body);
      expect(res.status).toBe(489);
      expect(res.headers.get("upstash-nonretryable-error")).toBe("true");
    }
  });
});

describe("QStash tokens", () => {
  it("a token without exp is refused, however well signed", async () => {
    const body = callback({});
    const url = `${env.PUBLIC_URL}/jobs/_failed`;
    const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const header = enc({ alg: "HS256", typ: "JWT" });
    const now = Math.floor(Date.now() / 1000);
    const payload = enc({
      iss: "Upstash",
      sub: url,
      nbf: now,
      iat: now,
      jti: "jwt_noexp",
      body: Buffer.from(await crypto.subtle.digest("SHA-256", Buffer.from(body))).toString("base64url"),
    });
    const mac = createHmac("sha256", env.QSTASH_CURRENT_SIGNING_KEY!).update(`${header}.${payload}`).digest();
    const res = await deliver("/jobs/_failed", body, `${header}.${payload}.${mac.toString("base64url")}`);
    expect(res.status).toBe(401);
    // The same claims with exp are accepted: only the missing exp was refused.
    expect((await deliver("/jobs/_failed", body)).status).toBe(200);
  });
});
