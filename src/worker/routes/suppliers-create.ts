import { createSupplier } from "../../domain/suppliers/create.ts";
import { supplierInput } from "../../domain/suppliers/schemas.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { valid } from "../validate.ts";

export function registerSuppliersCreate(app: App) {
  app.post("/suppliers", valid("json", supplierInput), async (c) => {
    const { supplier, eventIds } = await createSupplier(c.var.db, c.req.valid("json"));
    return written(c, { supplier }, eventIds, 201);
  });
}
