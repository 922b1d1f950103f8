import { createSupplier } from "../../domain/suppliers/create.ts";
import { supplierInput } from "../../domain/suppliers/schemas.ts";
import type { App } from "../new-app.ts";
import { ownScope } from "../tenant-auth.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerSuppliersCreate(app: App) {
  app.post("/suppliers", valid("json", supplierInput), async (c) => {
    const input = c.req.valid("json");
    const scope = ownScope(c, [input.scope], () => "scope");
    const { supplier, eventIds } = await createSupplier(c.var.db, { ...input, scope });
    return written(c, { supplier }, eventIds, 201);
  });
}
