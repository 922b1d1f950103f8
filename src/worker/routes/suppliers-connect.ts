import { connectSupplier } from "../../domain/suppliers/connect.ts";
import type { App } from "../new-app.ts";
import { written } from "../respond.ts";
import { idParam } from "./params.ts";

export function registerSuppliersConnect(app: App) {
  app.post("/suppliers/:id/connect", idParam("supplier"), async (c) => {
    const { supplier, eventIds } = await connectSupplier(c.var.db, c.req.valid("param").id);
    return written(c, { supplier }, eventIds);
  });
}
