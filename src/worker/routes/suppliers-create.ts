import { createSupplier } from "../../domain/suppliers/create.ts";
import { supplierInput } from "../../domain/suppliers/schemas.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { answerWrite } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerSuppliersCreate(app: App) {
  app.post("/suppliers", valid("json", supplierInput), async (c) => {
    const input = c.req.valid("json");
    // The scope filled in before the fingerprint, as notes-create.ts does.
    const values = { ...input, scope: ownScope(c, [input.scope], () => "scope") };
    return answerWrite(c, values, async (db) => {
      const { supplier, eventIds } = await createSupplier(db, values);
      // What was created (RFC 9110 §15.3.2); a 202 names the event to poll instead.
      return { result: { supplier }, eventIds, status: 201, location: `/suppliers/${supplier.id}` };
    });
  });
}
