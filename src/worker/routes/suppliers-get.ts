import { getSupplier } from "../../domain/suppliers/get.ts";
import type { App } from "../new-app.ts";
import { noQuery } from "../validate.ts";
import { ID } from "./params.ts";

export function registerSuppliersGet(app: App) {
  app.get(`/suppliers/${ID}`, noQuery, async (c) => {
    const supplier = await getSupplier(c.var.db, c.req.param("id"), c.var.tenant);
    return c.json({ supplier });
  });
}
