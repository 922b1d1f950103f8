import { connectSupplier } from "../../domain/suppliers/connect.ts";
import type { App } from "../new-app.ts";
import { noBody } from "../validate.ts";
import { written } from "../respond.ts";
import { ID } from "./params.ts";

export function registerSuppliersConnect(app: App) {
  app.post(`/suppliers/${ID}/connect`, noBody, async (c) => {
    const { supplier, eventIds } = await connectSupplier(c.var.db, c.req.param("id"), c.var.tenant);
    return written(c, { supplier }, eventIds);
  });
}
