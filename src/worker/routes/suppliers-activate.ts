import { activateSupplier } from "../../domain/suppliers/activate.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { idParam } from "./params.ts";

export function registerSuppliersActivate(app: App) {
  app.post("/suppliers/:id/activate", idParam("supplier"), async (c) => {
    const { supplier, eventIds } = await activateSupplier(c.var.db, c.req.valid("param").id);
    return written(c, { supplier }, eventIds);
  });
}
