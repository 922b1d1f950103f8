import { connectSupplier } from "../../domain/suppliers/connect.ts";
import type { App } from "../new-app.ts";
import { noBody } from "../validate.ts";
import { answerWrite } from "../respond.ts";
import { ID } from "./params.ts";

export function registerSuppliersConnect(app: App) {
  app.post(`/suppliers/${ID}/connect`, noBody, async (c) => {
    return answerWrite(c, null, async (db) => {
      const { supplier, eventIds } = await connectSupplier(db, c.req.param("id"), c.var.tenant);
      return { result: { supplier }, eventIds };
    });
  });
}
