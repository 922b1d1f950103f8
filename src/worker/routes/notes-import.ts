import { bodyLimit } from "hono/body-limit";
import { importNotes } from "../../domain/notes/import.ts";
import { MAX_IMPORT, noteImport } from "../../domain/notes/schemas.ts";
import type { App } from "../new-app.ts";
import { ApiError } from "../errors.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";

// 2,000 ordinary notes fit easily; the cap stops a request from making the
// isolate buffer and parse an arbitrarily large body.
const MAX_IMPORT_BYTES = 8 * 1024 * 1024;

export function registerNotesImport(app: App) {
  app.post(
    "/notes/import",
    bodyLimit({
      maxSize: MAX_IMPORT_BYTES,
      onError: () => {
        throw new ApiError(
          "PAYLOAD_TOO_LARGE",
          `an import body may be at most ${MAX_IMPORT_BYTES} bytes; split it (up to ${MAX_IMPORT} notes each)`,
        );
      },
    }),
    valid("json", noteImport),
    async (c) => {
      const { ids, eventIds } = await importNotes(c.var.db, c.req.valid("json").notes);
      return written(c, { ids }, eventIds, 201);
    },
  );
}
