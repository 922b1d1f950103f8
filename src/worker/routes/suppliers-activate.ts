import { activateSupplier } from "../../domain/suppliers/activate.ts";
import type { App } from "../new-app.ts";
import { noBody } from "../validate.ts";
import { written } from "../respond.ts";
import { ID } from "./params.ts";

export function registerSuppliersActivate(app: App) {
  app.post(`/suppliers/${ID}/activate`, noBody, async (c) => {
    const { supplier, eventIds } = await activateSupplier(c.var.db, c.req.param("id"), c.var.tenant);
    return written(c, { supplier }, eventIds);
  });
}
