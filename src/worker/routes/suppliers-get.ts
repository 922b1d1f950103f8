import { getSupplier } from "../../domain/suppliers/get.ts";
import type { App } from "../new-app.ts";
import { idParam } from "./params.ts";

export function registerSuppliersGet(app: App) {
  app.get("/suppliers/:id", idParam("supplier"), async (c) => {
    const supplier = await getSupplier(c.var.db, c.req.valid("param").id);
    return c.json({ supplier });
  });
}
