import http from "node:http";
import { beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../support/api-keys.ts";
import { useTestDatabase } from "../support/db.ts";
import { useWorkerd } from "../support/workerd.ts";

// Refused request bodies against the real Worker in workerd, behind wrangler dev's
// proxy as `npm run dev` runs it: a refusal must leave the next request working.
// A chunked body over the cap, answered 413 while the rest was still arriving,
// once broke exactly that: the next request, on any connection, got wrangler's
// "503 Your worker restarted mid-request" and was never run (body-limit.ts).
const t = useTestDatabase();
const stack = useWorkerd(t);
const MB = 1024 * 1024;
let key: string;
beforeAll(async () => {
  key = await newApiKey(t.db);
});

interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/** The answer's JSON, or its text when it is not JSON (wrangler's own 503 is plain text). */
function parse(status: number, text: string): Answer {
  try {
    return { status, body: text ? JSON.parse(text) : undefined };
  } catch {
    return { status, body: text };
  }
}

/**
 * POSTs `totalBytes` of a JSON note in 64 KiB writes, as curl or a streaming
 * client does: `Transfer-Encoding: chunked` unless a Content-Length is given.
 * The Worker may answer before the body is all sent; writing then stops, and a
 * write failing after the answer is not an error.
 */
function post(path: string, size: number, headers: Record<string, string> = {}) {
  const totalBytes = Math.floor(size);
  return new Promise<Answer>((resolve, reject) => {
    const req = http.request(`${stack.url}${path}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...("content-length" in headers ? {} : { "transfer-encoding": "chunked" }),
        ...headers,
      },
    });
    let answered = false;
    req.on("response", (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve(parse(res.statusCode!, Buffer.concat(chunks).toString())));
      res.on("error", reject);
    });
    req.on("error", (error) => {
      if (!answered) reject(error);
    });
    const head = Buffer.from('{"title":"big","body":"');
    const tail = Buffer.from('"}');
    let sent = 0;
    const write = () => {
      while (!answered && sent < totalBytes - tail.length) {
        const piece =
          sent === 0 ? head : Buffer.alloc(Math.min(64 * 1024, totalBytes - tail.length - sent), "x");
        sent += piece.length;
        if (!req.write(piece)) return void req.once("drain", write);
      }
      req.end(answered ? undefined : tail);
    };
    write();
  });
}

/** A JSON request as the tenant, on a new connection (the proxy's own connection to the Worker is reused). */
async function call(method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await stack.fetch(path, {
    method,
    headers: { Authorization: `Bearer ${key}`, "content-type": "application/json", connection: "close" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return parse(res.status, await res.text());
}

/** The requests after a refusal: each a write that must commit, then be read back. */
async function nextRequestsWork(label: string) {
  for (let i = 1; i <= 3; i++) {
    const title = `${label}, then note ${i}`;
    const created = await call("POST", "/notes", { title });
    expect({ after: label, i, status: created.status, body: created.body }).toMatchObject({ status: 201 });
    const id: string = created.body.note.id;
    const { rows } = await t.pool.query("SELECT title FROM corpus_notes WHERE id = $1", [id]);
    expect(rows).toEqual([{ title }]);
    const read = await call("GET", `/notes/${id}`);
    expect(read.status).toBe(200);
    expect(read.body.note.title).toBe(title);
  }
}

const KEY = () => ({ authorization: `Bearer ${key}` });

describe("a chunked body over the cap in workerd", () => {
  it("a 1.1 MB note is a 413, and the next requests are run", async () => {
    const res = await post("/notes", 1.1 * MB, KEY());
    expect(res.status).toBe(413);
    expect(res.body.error).toEqual({
      code: "PAYLOAD_TOO_LARGE",
      message: `the request body may be at most ${MB} bytes`,
      requestId: expect.any(String),
    });
    await nextRequestsWork("a 1.1 MB note");
  });

  it("a 1.1 MB supplier is a 413, and the next requests are run", async () => {
    const res = await post("/suppliers", 1.1 * MB, KEY());
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe("PAYLOAD_TOO_LARGE");
    await nextRequestsWork("a 1.1 MB supplier");
  });

  it("a 9 MB import is a 413, and the next requests are run", async () => {
    const res = await post("/notes/import", 9 * MB, KEY());
    expect(res.status).toBe(413);
    expect(res.body.error.message).toBe(
      `the request body may be at most ${8 * MB} bytes; split it (up to 2000 notes each)`,
    );
    await nextRequestsWork("a 9 MB import");
  });

  it("a 1.1 MB note without an API key is a 413 (the cap is checked first), and the next requests are run", async () => {
    const res = await post("/notes", 1.1 * MB);
    expect(res.status).toBe(413);
    await nextRequestsWork("a keyless 1.1 MB note");
  });
});

describe("other refusals of a large body in workerd", () => {
  it("an unsigned job with a 1.1 MB chunked body is a 401 unread, and the next requests are run", async () => {
    const res = await post("/jobs/notify.mail", 1.1 * MB);
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe("UNAUTHORIZED");
    await nextRequestsWork("an unsigned 1.1 MB job");
  });

  it("a 2 MB chunked import without an API key is a 401, and the next requests are run", async () => {
    const res = await post("/notes/import", 2 * MB);
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe("UNAUTHORIZED");
    await nextRequestsWork("a keyless 2 MB import");
  });

  it("a 2 MB chunked import as text/plain is a 415, and the next requests are run", async () => {
    const res = await post("/notes/import", 2 * MB, { ...KEY(), "content-type": "text/plain" });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe("UNSUPPORTED_MEDIA_TYPE");
    await nextRequestsWork("a 2 MB text/plain import");
  });

  it("a 1.1 MB note with its Content-Length is a 413 unread, and the next requests are run", async () => {
    const res = await post("/notes", 1.1 * MB, { ...KEY(), "content-length": String(Math.floor(1.1 * MB)) });
    expect(res.status).toBe(413);
    await nextRequestsWork("a 1.1 MB note with a Content-Length");
  });
});
